// `ringcap record`: wires events -> rings -> io_uring loop -> staging -> writer -> perf.data.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "ringcap/options.hpp"
#include "ringcap/ring.hpp"

namespace ringcap {

struct CpuSummary {
    int cpu = -1;
    RingCounters ring;
    uint64_t cqes = 0;          // readiness notifications for this ring
    bool hung_up = false;
};

struct EventSummary {
    std::string name;
    uint64_t samples = 0;       // samples in the file
    uint64_t lost = 0;          // sum of PERF_RECORD_LOST.lost
    uint64_t lost_samples = 0;  // PERF_FORMAT_LOST at the end (written as PERF_RECORD_LOST_SAMPLES)

    // Both figures count the same drops (the kernel bumps the ring's and the event's counter together);
    // the per-event read is exact, LOST records only say which event wrote next. Older kernels have
    // no PERF_FORMAT_LOST: then the LOST records are all there is.
    uint64_t kernel_lost() const { return lost_samples ? lost_samples : lost; }
};

struct RecordSummary {
    std::string path;
    std::string backend;        // "io_uring" or "epoll"
    std::vector<CpuSummary> cpus;
    std::vector<EventSummary> events;
    RingCounters total;
    uint64_t lost_samples = 0;
    uint64_t kernel_lost = 0;   // samples the kernel dropped, counted once (see EventSummary)
    uint64_t cqes = 0;          // poll completions
    uint64_t rearms = 0;        // multishot polls re-armed after a CQE without IORING_CQE_F_MORE
    uint64_t hangups = 0;       // rings retired after POLLHUP/POLLERR
    uint64_t rounds = 0;        // PERF_RECORD_FINISHED_ROUND written
    uint64_t synthesized_records = 0;  // COMM/MMAP2/MMAP written from /proc at start
    double synthesis_seconds = 0;
    uint64_t synthetic_offered = 0;  // synthetic source: samples its producers wrote or dropped
    uint64_t ring_bytes = 0;         // ring memory mapped (control pages + data)
    uint64_t staging_bytes = 0;      // staging buffers
    uint64_t loop_iterations = 0;
    uint64_t iterations_after_hangup = 0;  // loop iterations once every ring had hung up (bounded: no spin)
    uint64_t io_uring_enters = 0;  // io_uring_enter (or epoll_wait) calls
    uint64_t file_bytes = 0;    // data section bytes on disk
    uint64_t writes = 0;
    double seconds = 0;
    bool o_direct = false;
    std::string stop_reason;
    int exit_code = 0;
};

// Runs a whole record. Progress and the summary go to `log` (stderr for the CLI).
// Returns the exit status: 0 ok, 1 failure while recording, 2 bad usage or setup refused.
int run_record(const RecordOptions& opts, std::ostream& log, RecordSummary* summary = nullptr);

}  // namespace ringcap
