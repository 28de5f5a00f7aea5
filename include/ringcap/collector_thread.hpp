// A collector on a thread of its own, and the protocol the record session drives it with:
//   ready (loop built and armed on the thread) -> running -> stopped (on request, or on its own when
//   every ring hung up or a write failed) -> drained (after the source stopped: the rings emptied,
//   staging flushed, every write done).
// The io_uring is created on the collector's thread, which is the only one that submits to it
// (SINGLE_ISSUER|DEFER_TASKRUN). Between threads there are only atomics the collector writes once per
// pass or per buffer (round acknowledgements, what its writer owes) and a wake-up eventfd; commands
// (a ring to replace after CPU hotplug) wait for the end of a pass.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ringcap/collector.hpp"

namespace ringcap {

class CollectorThread final : private CollectorControl {
public:
    struct Setup {
        CollectorConfig config;
        std::span<const SourceRing> rings;  // its share of the source's rings (consecutive)
        size_t first_ring = 0;              // the index of rings[0] in the source's rings
        std::vector<int> cpus;              // runs on these CPUs (its rings'); empty: anywhere
        OutputFile* file = nullptr;
        FileSpace* space = nullptr;
        std::ostream* log = nullptr;
        int done_fd = -1;  // an eventfd the session waits on: written when run() ends on its own
    };

    // Starts the thread and waits until its collector is built and armed. Rethrows what building it
    // threw (io_uring refused with --backend uring, ...).
    explicit CollectorThread(Setup setup);
    ~CollectorThread();  // stops and joins
    CollectorThread(const CollectorThread&) = delete;
    CollectorThread& operator=(const CollectorThread&) = delete;

    void start();         // running
    void request_stop();  // it leaves run() at its next wake-up, which this causes
    void wake();          // its loop looks again (a round, a command, an allocation done)
    // After the source stopped: empties the rings, flushes, waits for every write; returns when done.
    void drain();

    // Round k: the collector acknowledges it after a complete pass that began after the request,
    // with everything that pass drained queued for writing (at offsets reserved before the ack).
    // With `written` the acknowledgement also waits until what the collector queued for the round
    // is on disk (an idle capture's round: the header refresh after it then covers the round whole,
    // one refresh per round instead of a second one for the writes still in flight).
    void request_round(uint64_t k, bool written = false);
    uint64_t round_done() const { return round_done_.load(std::memory_order_acquire); }
    // The newest sample time its rings showed, as of its last pass (the flight recorder's clock).
    uint64_t last_time() const { return last_time_.load(std::memory_order_relaxed); }
    uint64_t first_time() const { return first_time_.load(std::memory_order_relaxed); }  // the oldest (0: none yet)

    // Rotation: with round k's acknowledgement (request_round(k) follows), the collector moves on to
    // `file` at offsets from `space` (Collector::switch_output), after queuing everything it drained
    // before for the current file; one that stops before it acknowledged moves at its drain (what
    // it wrote is all the current file's). The previous switch must be settled.
    void request_switch(uint64_t k, OutputFile* file, FileSpace* space);
    // Its counters at the last switch (taken on its thread at that moment).
    struct SwitchPoint {
        uint64_t round = 0;
        CollectorSnapshot counters;
    };
    SwitchPoint switch_point() const;
    // After a switch: every write to the previous file has completed (then the session finishes
    // it), and where a failed one left it (UINT64_MAX: none failed), of that switch's file only.
    bool previous_settled() const;
    uint64_t previous_failed_offset() const;

    // Ran on the collector's thread at the end of a pass (it is woken for it); returns when done.
    void execute(std::function<void(Collector&)> command);

    bool ended() const { return ended_.load(std::memory_order_acquire); }  // run() returned on its own
    // It ended on its own (every fd hung up) and everything it read is written: rounds go on without it.
    bool emptied() const { return emptied_.load(std::memory_order_acquire); }
    StopCause cause() const { return cause_; }                              // once ended() or drained
    // What its writer owes and kept (Writer::published_*), and whether a write failed.
    uint64_t owed() const;
    uint64_t kept_end() const;
    int write_error() const;
    const std::string& fallback_reason() const { return fallback_reason_; }
    int nice() const { return nice_; }
    const std::string& nice_refused() const { return nice_refused_; }
    int realtime() const { return realtime_; }
    const std::string& realtime_refused() const { return realtime_refused_; }
    const std::string& backend() const { return backend_; }
    const std::string& describe() const { return describe_; }
    size_t first_ring() const { return setup_.first_ring; }
    size_t rings() const { return setup_.rings.size(); }

    // Counters, as published on every tick; exact once drained.
    CollectorSnapshot snapshot() const;
    double cpu_seconds() const;  // of the thread; exact once drained

private:
    enum class Phase { Starting, Ready, Running, Stopped, Draining, Drained, Failed };

    void body();
    void publish_snapshot();
    void set_phase(Phase p);
    void wait_phase(Phase p);

    // CollectorControl, on the collector's thread
    void on_control(Source s) override;
    bool stop_requested() const override { return stop_.load(std::memory_order_acquire); }
    void before_pass() override;
    void after_pass(bool complete) override;
    void on_tick() override { publish_snapshot(); }
    // Moves the collector to the file of the switch asked for, if it is round `round`'s (0: any).
    void switch_if_asked(uint64_t round);

    Setup setup_;
    std::unique_ptr<Collector> collector_;
    UniqueFd wake_fd_;
    std::thread thread_;
    std::exception_ptr error_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    Phase phase_ = Phase::Starting;
    std::vector<std::function<void(Collector&)>> commands_;
    uint64_t commands_done_ = 0, commands_sent_ = 0;
    CollectorSnapshot published_;
    double cpu_seconds_ = 0;
    // Copied from the collector before it is destroyed (on its thread, which alone may unregister
    // its io_uring's files: otherwise the ring keeps the output open, and locked, after we exit).
    std::string fallback_reason_, backend_, describe_, nice_refused_, realtime_refused_;
    int nice_ = 0, realtime_ = 0;
    uint64_t final_owed_ = UINT64_MAX, final_kept_end_ = UINT64_MAX;
    int final_error_ = 0;

    std::atomic<bool> stop_{false};
    std::atomic<bool> ended_{false};
    std::atomic<bool> emptied_{false};
    std::atomic<bool> has_commands_{false};
    alignas(64) std::atomic<uint64_t> round_request_{0};
    std::atomic<uint64_t> round_written_{0};  // the newest request that waits for its writes
    alignas(64) std::atomic<uint64_t> round_done_{0};
    std::atomic<uint64_t> last_time_{0}, first_time_{0};
    uint64_t marked_for_ = 0;    // the request whose ring heads are marked (Collector::mark_heads)
    uint64_t ack_for_ = 0;       // a request whose flush is under way (-z), acknowledged when done
    uint64_t ack_written_end_ = 0;  // ... and, when it waits for its writes, where they end
    // Rotation: the round to switch at, and where to (under mu_); whether the previous file's writes
    // have all completed (written once per switch, read by the session).
    uint64_t switch_round_ = 0;
    OutputFile* switch_file_ = nullptr;
    FileSpace* switch_space_ = nullptr;
    SwitchPoint switch_point_;
    std::atomic<bool> previous_settled_{true};
    uint64_t previous_failed_ = UINT64_MAX;
    StopCause cause_ = StopCause::Requested;
};

// Without --threads: a collector per CPU, at most this many (beyond, the rings split evenly among
// them). On a machine whose CPUs are all busy one collector for every ring ran for 50-290 ms at a
// stretch at 40 kHz dwarf, starving the per-CPU kernel workers its own writes need and leaving the
// other rings to fill (README, Collector threads).
inline constexpr size_t kDefaultCollectors = 16;
// How the rings are split among collectors: `--threads` as perf takes it (a number, or cpu, core,
// package, numa; "" = the default above), for rings on `cpus` (one ring per CPU, in this order). Returns, per collector, the
// number of consecutive rings it takes; CPUs that share a core, package or node are kept together
// (rings are in CPU order, and a group's CPUs are usually consecutive; when not, a collector takes a
// run of them).
std::vector<size_t> split_rings(const std::string& threads, const std::vector<int>& cpus);
// The CPUs in an order that keeps each group of `threads` (core, package, numa) together; as they are
// for a number or cpu.
std::vector<int> cpu_order(const std::string& threads, std::vector<int> cpus);
// The group of `cpu` for `threads` (core, package, numa), from /sys/devices/system/cpu/cpuN.
std::string cpu_group_key(const std::string& threads, int cpu);
// Whether `spec` is a --threads value: a number >= 1, cpu, core, package or numa.
bool valid_threads_spec(const std::string& spec);

}  // namespace ringcap
