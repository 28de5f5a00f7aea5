// The perf.data file of a record (file mode): created under a temporary name with a provisional
// header, published once setup succeeded, its header kept current while recording (crash safety),
// and finished with the feature sections and the final header. The collectors' Writers fill its data
// section. A pipe or a rotating set of files would be other outputs beside this one.
#pragma once

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <cstdint>
#include <string>
#include <unistd.h>
#include <vector>

#include "ringcap/events.hpp"
#include "ringcap/perf_data.hpp"
#include "ringcap/record_output.hpp"
#include "ringcap/writer.hpp"

namespace ringcap {

class FileOutput final : public RecordOutput {
public:
    // Creates the file next to `path` (nothing at `path` changes yet) with a provisional header
    // (data size 0), so the file is recognisable from its first write. Throws Error naming the cause.
    // `own_path`: rotation's next file (OutputFile::create).
    FileOutput(const std::string& path, bool allow_direct, std::vector<AttrEntry> attrs, bool own_path = false);

    OutputFile& file() { return file_; }
    const OutputFile& file() const { return file_; }
    const std::vector<AttrEntry>& attrs() const { return attrs_; }
    uint64_t data_offset() const { return data_offset_; }
    // Setup succeeded and the first `data_size` bytes of data (the records of what already runs) are
    // written: the header says so, both are made durable, and the file moves into place; an existing
    // one becomes .old (as perf does). From here on the file is valid from its first byte, even
    // after kill -9. Throws Error (exit status 2) if another ringcap published the path meanwhile.
    void publish(uint64_t data_size);

    // Keeps the on-disk header's data size at `durable` (a record boundary below which every byte
    // is on disk), so perf reads a file cut short by SIGKILL up to there: rewrites the first page,
    // with O_DIRECT where the file has it (inline, and it never takes the inode lock exclusively as a
    // buffered write does). At most every 250 ms.
    void refresh_header(uint64_t durable);
    std::optional<std::chrono::steady_clock::time_point> refresh_due(uint64_t durable) const {
        if (durable == published_size_) return {};
        return published_at_ + kHeaderRefresh;
    }
    uint64_t header_covers() const { return published_size_; }
    static constexpr auto kHeaderRefresh = std::chrono::milliseconds(250);
    // The feature bits of the headers publish() and refresh_header() write (kAnchorFeatures with -z:
    // then every data size they are given must end at a compression anchor).
    void set_crash_features(const uint64_t (&features)[4]) { std::memcpy(crash_features_, features, sizeof features); }
    // Writes `len` bytes at `offset` (the session's own blocks: the records of what already runs,
    // round markers, LOST_SAMPLES), with O_DIRECT when `p`, `len` and `offset` are 4 KiB-aligned.
    // Returns 0 or the errno.
    int write_block(uint64_t offset, const void* p, size_t len);

    // Tests: replaces fdatasync(2) (called with the buffered fd; 0, or -1 with errno set), which
    // each header refresh runs before it writes the header and finish() after the final one.
    void set_sync(std::function<int(int)> sync) { sync_ = std::move(sync); }

    // Ids of events opened during the record (a CPU that came back online), for event `event_index`.
    void add_ids(size_t event_index, const std::vector<uint64_t>& ids);

    // After a failed write: where the last whole record ends in [from, to) of the data section, read
    // back from the file (with -z maybe inside a frame: perf decompresses the records it has). `from` must be a record boundary (the writer's durable size) and every
    // byte below `to` on disk (the writer's bytes_kept): so a full disk keeps all that fit.
    uint64_t last_record_end(uint64_t from, uint64_t to) const;

    // The final file for `data_size` bytes of data: cuts what a failed write may have left beyond
    // them, writes the features after the data (the tracepoints' formats for `specs`, the build-ids
    // `build_ids` unless that is null) and the final header. Returns "" or, when even
    // the small feature block did not fit (a full disk), why the file has no features. Throws Error
    // (exit status 1) if the file cannot be cut or its header written. `compression` and
    // `sample_time` are passed on to build_features.
    std::string finish(uint64_t data_size, const HostInfo& host, const std::vector<EventSpec>& specs,
                       const std::vector<BuildIdEntry>* build_ids, const CompressionFeature* compression = nullptr,
                       const SampleTimeRange* sample_time = nullptr);

    // The size of the feature block finish() would write now with these build-ids (--max-size
    // keeps room for it), and of the ids that do not fit before the data.
    uint64_t tail_bytes(const HostInfo& host, const std::vector<EventSpec>& specs,
                        const std::vector<BuildIdEntry>& build_ids) const;

private:
    void write_head(uint64_t data_size);  // header, attrs, ids: synchronously
    int sync_data() const { return sync_ ? sync_(file_.buffered_fd()) : ::fdatasync(file_.buffered_fd()); }

    OutputFile file_;
    std::vector<AttrEntry> attrs_;
    uint64_t data_offset_ = 0;
    // The file's first page as it is on disk (header, attrs...): a refresh rewrites it whole,
    // patching only the data size.
    struct alignas(4096) Page {
        std::byte bytes[4096];
    };
    std::unique_ptr<Page> first_page_ = std::make_unique<Page>();
    uint64_t published_size_ = 0;
    uint64_t crash_features_[4] = {0, 0, 0, 0};
    std::chrono::steady_clock::time_point published_at_{};
    std::function<int(int)> sync_;  // empty: fdatasync
};

}  // namespace ringcap
