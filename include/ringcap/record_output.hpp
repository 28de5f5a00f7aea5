// Where a record's data goes, as the session sees it: a perf.data file (FileOutput) or perf's pipe
// format on stdout (PipeOutput). Both give the collectors' Writers an OutputFile whose data section
// they fill at offsets reserved in a FileSpace; what is around the data differs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ringcap/events.hpp"
#include "ringcap/perf_data.hpp"
#include "ringcap/output_file.hpp"

namespace ringcap {

class RecordOutput {
public:
    virtual ~RecordOutput() = default;

    virtual OutputFile& file() = 0;
    virtual const OutputFile& file() const = 0;
    virtual const std::vector<AttrEntry>& attrs() const = 0;
    virtual uint64_t data_offset() const = 0;
    // Setup succeeded; the first `data_size` bytes of data are written.
    virtual void publish(uint64_t data_size) = 0;
    // Every byte of data below `durable` (a record boundary) is written: a file names it in its
    // header, a pipe may send it.
    virtual void refresh_header(uint64_t durable) = 0;
    // When refresh_header(durable) will next write, if the header does not cover `durable` yet (the
    // session wakes for it); none when it does, or when there is no header to refresh.
    virtual std::optional<std::chrono::steady_clock::time_point> refresh_due(uint64_t /*durable*/) const { return {}; }
    // How much data the header on disk names (0 with no header to refresh).
    virtual uint64_t header_covers() const { return 0; }
    virtual void set_crash_features(const uint64_t (&features)[4]) = 0;
    // The session's own blocks at reserved offsets. Returns 0 or the errno.
    virtual int write_block(uint64_t offset, const void* p, size_t len) = 0;
    // Ids of events opened during the record (a CPU back online).
    virtual void add_ids(size_t event_index, const std::vector<uint64_t>& ids) = 0;
    // After a failed write: where the last whole record ends in [from, to) of the data section.
    virtual uint64_t last_record_end(uint64_t from, uint64_t to) const = 0;
    // The data is complete at `data_size` bytes. Returns "" or why the features are missing.
    virtual std::string finish(uint64_t data_size, const HostInfo& host, const std::vector<EventSpec>& specs,
                               const std::vector<BuildIdEntry>* build_ids, const CompressionFeature* compression = nullptr,
                               const SampleTimeRange* sample_time = nullptr) = 0;

    // Why the record must stop now ("" = no reason): a pipe's reader went away or is too slow.
    virtual std::string stop_reason() const { return ""; }
    // After finish(): why not all data reached its destination ("" = it did). Makes the exit status 1.
    virtual std::string error() const { return ""; }
    // After finish(): how much of `data_size` reached its destination.
    virtual uint64_t data_kept(uint64_t data_size) const { return data_size; }
};

}  // namespace ringcap
