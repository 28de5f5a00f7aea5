// `ringcap record`: a short coordinator over the stages. plan -> open the source -> collector ->
// output -> synthesize -> start -> run -> stop -> finish, then the summary.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "ringcap/collector.hpp"
#include "ringcap/options.hpp"
#include "ringcap/source.hpp"

namespace ringcap {

struct EventSummary {
    std::string name;
    uint64_t samples = 0;       // samples in the file
    uint64_t lost = 0;          // sum of PERF_RECORD_LOST.lost
    uint64_t lost_samples = 0;  // PERF_FORMAT_LOST at the end (written as PERF_RECORD_LOST_SAMPLES)
    uint64_t dropped = 0;       // read, then left out under back-pressure (LOST_SAMPLES records too)

    bool lost_read = false;     // lost_samples was read (the record stopped): it is the figure

    // Both figures count the same drops in total (the kernel bumps the ring's and the failing
    // event's counter together), but a LOST record carries the id of the event that wrote next: of
    // events sharing a ring (the tracking event's with the samples'), the per-event read is the only
    // exact split. While the record runs, the LOST records are all there is.
    uint64_t kernel_lost() const { return lost_read ? lost_samples : lost; }
};

// Every counter of a record, merged from its collectors. Can be taken while it runs
// (Recorder::snapshot), which is what a status line or a JSON report reads.
struct RecordSnapshot {
    double seconds = 0;                // since the events were enabled
    std::vector<RingSummary> cpus;     // per ring, in ring order
    std::vector<EventSummary> events;  // the recorded events (not the tracking event)
    RingCounters total;
    uint64_t lost_samples = 0;  // PERF_FORMAT_LOST, read at the end
    uint64_t kernel_lost = 0;   // everything the kernel dropped, counted once (see EventSummary):
                                // the recorded events' samples and the tracking event's records
    uint64_t tracking_lost = 0; // of which COMM/MMAP/FORK/EXIT records (processes or maps may be missing)
    uint64_t cqes = 0;          // poll completions
    uint64_t rearms = 0;        // multishot polls re-armed after a CQE without IORING_CQE_F_MORE
    uint64_t hangups = 0;       // fds retired after POLLHUP/POLLERR
    uint64_t rounds = 0;        // PERF_RECORD_FINISHED_ROUND written
    uint64_t waits = 0;         // io_uring_enter (or epoll_wait) calls
    uint64_t waits_after_hangup = 0;  // of which after every ring had hung up (bounded: no spin)
    uint64_t writes = 0;
    uint64_t preallocations = 0;      // fallocate calls ahead of the writes
    uint64_t writes_beyond_allocation = 0;  // writes past the preallocated part (appends: a worker ran them)
    uint64_t bytes_written = 0;       // data bytes whose write completed
    uint64_t synthesized_records = 0; // COMM/MMAP2/MMAP written from /proc at start
    // --max-size: buffers read from the rings but not written (the file was full before the record
    // stopped): bytes, samples in them, and COMPRESSED records in them (-z: samples not counted).
    uint64_t refused_bytes = 0;
    uint64_t refused_samples = 0;
    uint64_t refused_compressed = 0;
    uint64_t ring_bytes = 0;          // ring memory mapped (control pages + data)
    uint64_t staging_bytes = 0;
    uint64_t staging_used = 0;        // staging buffers in use (a status line's "staging fill")
    // -z: staging bytes compressed, the COMPRESSED records they became (bytes, headers included, and
    // count), frames of poorly compressible data (compressed one block per record), CPU time spent.
    uint64_t compress_input = 0;
    uint64_t compressed_bytes = 0;
    uint64_t compressed_records = 0;
    uint64_t compressed_chunked = 0;
    double compress_cpu_seconds = 0;
    // Back-pressure, over every collector (the cut and dropped samples are in `total` and per CPU).
    PressureStats pressure;
};

// One collector thread.
struct CollectorSummary {
    size_t rings = 0;
    double cpu_seconds = 0;  // of its thread
    uint64_t bytes = 0;      // data it wrote
};

// --flight-recorder: the window at the end and every dump written.
struct DumpSummary {
    std::string path;
    std::string trigger;       // "SIGUSR2", "control", "end", "command exited with status 3"
    uint64_t bytes = 0;        // data section
    double window_seconds = 0; // how far back it reached
    uint64_t start_time = 0, end_time = 0;  // perf clock (ns): the window's start and its newest sample
    int64_t samples = -1;      // counted from the file (-1: not counted, -2: the file did not parse)
};
struct FlightSummary {
    double duration_s = 0;     // --flight-recorder
    uint64_t bound = 0;        // its memory bound
    double window_seconds = 0; // the window at the end
    uint64_t window_bytes = 0;
    bool shrunk = false;       // the bound, not the duration, set its start at some point
    std::vector<DumpSummary> dumps;
};

struct RecordSummary : RecordSnapshot {
    std::string path;                // the (last) file written
    std::vector<std::string> files;  // every file kept (with --switch-output, the rotated ones)
    std::string backend;  // "io_uring" or "epoll"
    std::string stop_reason;
    uint64_t file_bytes = 0;  // data section bytes in the file
    int compression_level = 0;
    bool o_direct = false;
    int collector_nice = 0;             // what the collector threads ran at (when not real-time)
    std::string collector_nice_refused;  // why not at the default nice ("" if they were)
    int collector_realtime = 0;         // their SCHED_FIFO priority (0: none)
    std::string collector_realtime_refused;  // why not real-time by default ("" if they were, or not asked)
    std::vector<CollectorSummary> collectors;
    std::string command_status;  // what became of the recorded command ("exited with status 3")
    std::string error;           // why the record failed while running (a write error), or ""
    uint64_t unwritten_bytes = 0;  // data that did not reach its destination (a write error, a pipe's
                                   // reader gone), beyond refused_bytes
    int exit_code = 0;           // the record's, or else the command's (as perf record)
    std::optional<FlightSummary> flight;
};

// Runs a whole record of perf events as the options say. Progress and the summary go to `log`
// (stderr for the CLI). Returns the exit status: 0 ok, 1 failure while recording, 2 bad usage or
// setup refused (then no file is created or changed). Throws Error for the CLI to print.
int run_record(const RecordOptions& opts, std::ostream& log, RecordSummary* summary = nullptr);
// The same with another ring source (the bench's synthetic rings). The options' target (-a, -C,
// -p, -t, command) is not used.
int run_record(const RecordOptions& opts, RingSource& source, std::ostream& log, RecordSummary* summary = nullptr);

// The summary as ringcap prints it at the end: per ring, per event, totals, one machine-readable
// line, and warnings that say what to change.
void print_summary(const RecordSummary& s, std::ostream& log);
// "1.50 MiB"
std::string human_bytes(uint64_t bytes);

}  // namespace ringcap
