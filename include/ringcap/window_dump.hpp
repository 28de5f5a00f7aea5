// The flight recorder's dumps (window_output.hpp): what a dump needs besides the session's own
// finishing of a perf.data file. The window's bytes are copied from memory into the dump with
// sendfile, and its samples counted afterwards (decompressing, on a thread of its own at the lowest
// priority, so that the dump itself is complete as soon as its bytes are on disk).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace ringcap {

// Copies [in_off, in_off + len) of `in` to `out` at `out_off`. 0 or the errno.
int copy_range(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t len);

// The records in [offset, offset + len) of `fd`, a perf.data data section: PERF_RECORD_COMPRESSED
// records (zstd, as perf reads them: one stream across the records) are decompressed and their
// records counted too. `ok` false when the data does not parse to its end.
struct RecordCount {
    uint64_t records = 0;
    uint64_t samples = 0;
    bool ok = true;
};
RecordCount count_records(int fd, uint64_t offset, uint64_t len);

// One dump as the summary and the JSON report it.
struct DumpInfo {
    std::string path;
    std::string trigger;            // "SIGUSR2", "control", "end", "command failed"
    uint64_t data_bytes = 0;
    double window_seconds = 0;      // how far back the window reached (capture time)
    uint64_t start_time = 0;        // perf clock: the window's first and last sample, about
    uint64_t end_time = 0;
    std::shared_ptr<std::atomic<int64_t>> samples = std::make_shared<std::atomic<int64_t>>(-1);  // -1: not counted yet
};

// Counts a dump's samples on a thread of its own (nice 19) from the published file; join() waits.
class DumpCounter {
public:
    DumpCounter() = default;
    DumpCounter(const DumpCounter&) = delete;
    DumpCounter& operator=(const DumpCounter&) = delete;
    ~DumpCounter() { join(); }
    // `fd` is borrowed until the count ends: the thread keeps its own duplicate. `background`: at
    // nice 19 (a dump while recording); else at the caller's priority (the end's: it is waited for).
    void start(int fd, uint64_t offset, uint64_t len, std::shared_ptr<std::atomic<int64_t>> out, bool background = true);
    void join();

private:
    std::thread thread_;
};

}  // namespace ringcap
