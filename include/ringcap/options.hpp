// `ringcap record` options: what the user asked for, with perf's defaults. Settings derived from
// them and from the machine (ring size, wake-up watermark, staging count) are the record plan's
// (plan.hpp); a 0 here means "let the plan choose".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ringcap/events.hpp"
#include "ringcap/loop.hpp"

namespace ringcap {

// --switch-output[=signal|SIZE|TIME]: when the record moves on to a new file.
struct SwitchOutput {
    enum class Mode { None, Signal, Size, Time };
    Mode mode = Mode::None;
    uint64_t bytes = 0;    // Size: switch once the file holds this much
    double seconds = 0;    // Time: switch this often
    size_t max_files = 0;  // --switch-max-files: keep the newest N finished files (0 = all)
};

// The collectors' nice value unless --collector-nice says otherwise: with every CPU busy, a
// collector at the workload's priority waits its turn while its rings fill (README, Performance).
inline constexpr int kDefaultCollectorNice = -5;
// The collectors' SCHED_FIFO priority by default, where allowed (root or CAP_SYS_NICE): the lowest,
// above every normal task. Their encoders and ringcap's main thread never run real-time.
inline constexpr int kDefaultRealtimePriority = 1;

struct RecordOptions {
    // Target
    bool all_cpus = false;                  // -a
    std::optional<std::vector<int>> cpus;   // -C 0,2-3
    std::vector<int> pids;                  // -p PID,...: existing processes (all their threads)
    std::vector<int> tids;                  // -t TID,...: existing threads
    std::vector<std::string> command;       // -- COMMAND ARGS... (per-task unless -a/-C)
    double duration_s = 0;                  // --duration SECONDS (0 = until stopped)
    // -G NAME[,NAME...] (needs -a/-C): parsed into one entry per event, in -e order, the cgroup whose
    // tasks the event follows ("" = every task); a single name is every event's. Empty without -G.
    std::vector<std::string> cgroups;

    // Events and sampling
    std::vector<EventSpec> events;          // -e (default cpu-clock)
    SamplingConfig sampling;                // -F 4000 / -c PERIOD, wake-up policy
    bool freq_given = false;                // -F was given (else 4000 may be lowered to the sysctl)
    size_t mmap_pages = 0;                  // -m: data pages per CPU ring (power of two); 0 = the plan's default

    // Output
    std::string output = "perf.data";       // -o
    SwitchOutput switch_output;             // --switch-output, --switch-max-files (rotation)
    uint64_t max_size = 0;                  // --max-size SIZE: stop before the file exceeds it (0 = none)
    std::string json;                       // --json PATH|-: the summary as JSON ("" = none)
    // --flight-recorder=DURATION: keep only the newest DURATION of data, compressed, in memory; write
    // it as a file of its own (a dump) on SIGUSR2, the control command snapshot, and at the end
    // (0 = off). window_output.hpp.
    double flight_recorder_s = 0;
    uint64_t flight_recorder_size = 0;       // --flight-recorder-size SIZE: the window's memory bound (0 = default)
    bool flight_recorder_on_failure = false; // --flight-recorder-on-failure: the end's dump only if the command failed
    std::string control;                     // --control=fifo:CTL[,ACK] or fd:CTL[,ACK] (perf's control interface)
    uint64_t pipe_backlog = 0;              // --pipe-backlog SIZE: with -o -, stop beyond this backlog (0 = default)
    bool quiet = false;                     // -q: only errors on stderr
    bool live_status = false;               // a status line refreshed every second (the CLI sets it
                                            // when stderr is a terminal and -q is not given)
    int verbose = 0;                        // -v
    bool build_ids = true;                  // --no-buildid: skip the BUILD_ID feature
    bool build_id_cache = true;             // -N/--no-buildid-cache: leave ~/.debug alone
    bool buildid_all = false;               // --buildid-all: every file mapped executable, not only those hit
    uint64_t buildid_cache_max = 2ull << 30;       // --buildid-cache-max TOTAL[,FILE]: copies per record
    uint64_t buildid_cache_max_file = 512ull << 20;  // and per file
    int compression_level = 0;              // -z[N], --compression-level[=N]: zstd level (0 = off)
    int realtime_priority = kDefaultRealtimePriority;  // -r: the collectors' SCHED_FIFO priority (0: --no-realtime)
    bool realtime_given = false;            // -r given: a refusal is an error; the default is best effort
    int collector_nice = kDefaultCollectorNice;  // --collector-nice: the collectors' and encoders' nice
    bool collector_nice_given = false;      // given: a refusal is an error; the default is best effort
    Backend backend = Backend::Auto;        // --backend uring|epoll (auto: io_uring, else epoll)
    std::string threads;                    // --threads[=N|cpu|core|package|numa]: collectors ("" = one)

    // Internal knobs (tests and bench): staging geometry, CQ size, O_DIRECT.
    size_t staging_buffer_bytes = 1u << 20;
    size_t staging_buffers = 0;             // 0 = the plan's choice from the number of rings
    unsigned cq_entries = 0;                // 0 = sized for all polls plus writes in flight
    bool allow_direct = true;               // --no-direct
    bool stack_trim = true;                 // --no-stack-trim: dwarf stacks copied whole (comparisons)
    bool cut_samples = true;                // --no-cut-samples: back-pressure never cuts stacks
    bool back_pressure = true;              // --no-back-pressure: none at all (the synthetic bench)
    // Tests: every collector's Writer::set_fault (offset, length, result -> the result it sees).
    std::function<int(uint64_t, uint32_t, int)> write_fault;

    std::vector<std::string> argv;          // the whole command line, for the CMDLINE feature
};

// Per-task capture: -p, -t, or a command without -a/-C.
inline bool per_task(const RecordOptions& o) {
    return !o.pids.empty() || !o.tids.empty() || (!o.command.empty() && !o.all_cpus && !o.cpus);
}

// Parses the arguments after "record". Throws Error (exit status 2) on bad input.
RecordOptions parse_record_args(const std::vector<std::string>& args);
// perf's sizes and times: "100M" (B, K, M, G; a plain number is bytes), "30s" (s, m, h, d). Throw
// Error (exit status 2) naming `flag`.
uint64_t parse_size(const std::string& flag, const std::string& v);
double parse_time(const std::string& flag, const std::string& v);

extern const char* const kRecordUsage;

}  // namespace ringcap
