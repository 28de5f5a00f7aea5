// The flight recorder's output (--flight-recorder): the capture stays in memory, compressed (-z), and
// only its newest part is kept. The collectors' Writers fill a memfd at reserved offsets as they fill
// a file; the session drops what is older than the window (at round markers, so that what is kept
// starts at a buffer boundary) or beyond the memory bound, and the memfd gives those pages back.
// Nothing reaches the disk until a dump (window_dump.hpp) copies the window into a perf.data file of
// its own, while the collectors go on writing here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringcap/record_output.hpp"

namespace ringcap {

class WindowOutput final : public RecordOutput {
public:
    // Throws Error (exit status 2) when no memfd can be made.
    explicit WindowOutput(std::vector<AttrEntry> attrs);

    OutputFile& file() override { return file_; }
    const OutputFile& file() const override { return file_; }
    const std::vector<AttrEntry>& attrs() const override { return attrs_; }
    uint64_t data_offset() const override { return kDataOffset; }
    void publish(uint64_t) override {}
    void refresh_header(uint64_t) override {}  // no header: a dump writes its own
    void set_crash_features(const uint64_t (&)[4]) override {}
    int write_block(uint64_t offset, const void* p, size_t len) override;
    // Kept for the dumps' attrs (a CPU back online).
    void add_ids(size_t event_index, const std::vector<uint64_t>& ids) override;
    // A write into memory failed (the memory limit): what is known to be whole.
    uint64_t last_record_end(uint64_t from, uint64_t) const override { return from; }
    // The window is not a file: what it holds at the end goes to the last dump, if any.
    std::string finish(uint64_t, const HostInfo&, const std::vector<EventSpec>&, const std::vector<BuildIdEntry>*,
                       const CompressionFeature* = nullptr, const SampleTimeRange* = nullptr) override {
        return "";
    }

    // Frees the data below file offset `offset` (a reservation boundary): the window starts there.
    void drop_below(uint64_t offset);
    uint64_t start() const { return start_; }  // the window's first byte (a file offset)

    static constexpr uint64_t kDataOffset = 4096;  // as aligned as a file's (the Writers expect it)

private:
    OutputFile file_;
    std::vector<AttrEntry> attrs_;
    uint64_t start_ = kDataOffset;
};

}  // namespace ringcap
