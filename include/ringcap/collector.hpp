// A collector drains a set of rings into the output file: its own Loop (multishot polls, writes),
// StagingPool, Writer and counters, and the pass, idle-flush and hang-up logic. It shares no mutable
// state with anything else while it runs (the file's offsets come from an atomic counter), so several
// run on threads of their own (collector_thread.hpp); the record session coordinates them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ringcap/encoder_thread.hpp"
#include "ringcap/loop.hpp"
#include "ringcap/pressure.hpp"
#include "ringcap/ring.hpp"
#include "ringcap/sideband_state.hpp"
#include "ringcap/source.hpp"
#include "ringcap/staging.hpp"
#include "ringcap/writer.hpp"

namespace ringcap {

struct CollectorConfig {
    LoopConfig loop;                 // backend and sizes (RecordPlan::loop)
    size_t staging_buffers = 16;
    size_t staging_buffer_bytes = 1u << 20;
    size_t events = 0;               // events in the record (per-event counters)
    // BUILD_ID: where the collector hands the executable mappings and sample pages it saw (at its
    // tick, its switch and its end); null without build-ids.
    DsoRegistry* dsos = nullptr;
    // --flight-recorder: where the collector hands the records of tasks and mappings it copied (at
    // its tick, its round acknowledgements and its end); null otherwise.
    SidebandInbox* sideband = nullptr;
    int realtime_priority = 0;       // SCHED_FIFO priority for the collector's thread (0 = none)
    bool realtime_required = false;  // -r given: a refusal is an error; the default is best effort
    int nice = 0;                    // --collector-nice, unless -r: the thread's (and its encoder's) nice (0 = as is)
    bool nice_required = false;      // a refused nice is an error (given), else noted (the default)
    double tick_seconds = 1.0;       // idle flush; bounds what a crash loses to about this much
    // While the collector drains less than kQuietTickRate a second, its tick (so its idle flush, and
    // what a crash loses) stretches to this, and the session's rounds do its work (round_requested):
    // an idle capture wakes its threads and the disk every few seconds, not every second. 0: never
    // (the live status line and a flight recorder's window want their second).
    double quiet_tick_seconds = 5.0;
    int compression_level = 0;       // -z: zstd level of the encoder stage (0 = off: no encoder, no copy)
    // Per event index, the user-stack dump size its samples end with (RingReader::set_stacks: each
    // is trimmed to dyn_size), or 0.
    std::vector<uint32_t> stack_dumps;
    // Graded back-pressure (pressure.hpp): off with `pressure_off` (the synthetic bench measures
    // without it). Per event index, its sampling frequency when in frequency mode (0: not lowered),
    // and whether the kernel took it as a period in nanoseconds instead (cpu-clock and task-clock:
    // hrtimer events turn -F into a fixed period, and PERF_EVENT_IOC_PERIOD then sets a period).
    PressureConfig pressure;
    bool pressure_off = false;
    std::vector<uint64_t> sample_freqs;
    std::vector<bool> period_in_ns;
    bool verbose = false;            // -v: a line each time a grade engages or is undone
    WriteFault write_fault;          // tests: replaces its writes' results (Writer::set_fault)
};

// Below this drain rate (bytes a second, all of a collector's rings) the tick is the quiet one.
inline constexpr uint64_t kQuietTickRate = 64u << 10;
// On the quiet tick, a round does the tick's work and moves the next tick this far: past the next
// round, which the session sends at most MainWake::kQuietLongest later (a backstop, should none come).
inline constexpr double kRoundTickBackstop = 40.0;

// The next tick's period, from the last period and what the collector drained in it: `quiet` while
// that was less than kQuietTickRate a second, else `base` (quiet 0 or below base: always base).
double next_tick_seconds(double base, double quiet, double last_period, uint64_t drained);

// What back-pressure did on one collector (its rings' cut and dropped samples are per ring).
struct PressureStats {
    uint64_t faster_zstd = 0;     // times a faster zstd level was engaged
    uint64_t shorter_stacks = 0;  // times stacks were cut shorter
    uint64_t slowed = 0;          // times the sampling frequency was lowered
    uint64_t drops = 0;           // times samples began to be dropped
    uint64_t period_errors = 0;   // PERF_EVENT_IOC_PERIOD refused (the rate stayed)
    std::string worst;            // the strongest grade reached ("" if none)
    unsigned worst_rate_shift = 0;
    int fastest_zstd = 0;
    uint32_t shortest_cut = 0;
    double headroom = 1;          // the last one measured
    bool any() const { return faster_zstd || shorter_stacks || slowed || drops; }
};

// How run() ended.
enum class StopCause { Requested, AllHungUp, WriteError };

// The collector's view of whoever runs it. Everything is called on the collector's thread.
class CollectorControl {
public:
    virtual ~CollectorControl() = default;
    // A control source watched on the collector's loop fired (Wake).
    virtual void on_control(Source s) = 0;
    // Checked before every loop wait of run(); true ends it.
    virtual bool stop_requested() const = 0;
    // Around every pass of run(): `complete` says whether it emptied every ring.
    virtual void before_pass() {}
    virtual void after_pass(bool /*complete*/) {}
    // The housekeeping tick (every tick_seconds).
    virtual void on_tick() {}
};

// Counters of one ring.
struct RingSummary {
    int cpu = -1;
    RingCounters ring;
    uint64_t wakeups = 0;  // readiness notifications (CQEs or epoll events)
    bool hung_up = false;  // every fd of the ring hung up; retired from the loop
    // CPU hotplug (filled in by the record session): times the CPU went offline, times its events
    // were opened again when it came back, and whether it is offline at the end.
    uint32_t went_offline = 0, reopened = 0;
    bool offline = false;
    std::vector<uint64_t> dropped_events;  // samples dropped under back-pressure, per event index
};

// Everything a collector counts, copied at one moment.
struct CollectorSnapshot {
    std::vector<RingSummary> rings;
    std::vector<EventCounters> events;  // by event index
    LoopStats loop;
    WriterStats writer;
    EncoderStats encoder;             // -z
    uint64_t samples_placed = 0;      // -z: samples in the compressed records sent to the file so far
    uint64_t hangups = 0;             // fds retired after POLLHUP/POLLERR
    uint64_t waits_after_hangup = 0;  // loop waits once every ring had hung up (bounded: no spin)
    uint64_t ring_bytes = 0;          // ring memory mapped
    uint64_t staging_bytes = 0;
    uint64_t staging_used = 0;        // of which buffers in use (filling, ready or being written)
    PressureStats pressure;
};

class Collector final : public LoopHandler, public MmapObserver {
public:
    // Builds the loop (with Backend::Auto, a refused io_uring falls back to epoll and
    // fallback_reason() says why) and staging for `rings`, which must stay mapped while the
    // collector lives. Applies -r to the calling thread, which is the one that runs the collector.
    Collector(const CollectorConfig& cfg, std::span<const SourceRing> rings, CollectorControl& control,
              std::ostream& log);
    ~Collector() override;
    Collector(const Collector&) = delete;
    Collector& operator=(const Collector&) = delete;

    const Loop& loop() const { return *loop_; }
    const std::string& fallback_reason() const { return fallback_reason_; }
    // The nice value the thread runs at, and why not the configured one ("" if it is).
    int nice() const { return nice_; }
    const std::string& nice_refused() const { return nice_refused_; }
    // The SCHED_FIFO priority it runs at (0: none), and why not the configured one ("" if it does).
    int realtime() const { return realtime_; }
    const std::string& realtime_refused() const { return realtime_refused_; }

    // Sends the stream to `file`, at offsets from `space` (shared by the file's writers). Before arm().
    void attach(OutputFile& file, FileSpace& space);
    Writer& writer() { return *writer_; }
    // Control sources to watch on this collector's loop, and the duration timer.
    void watch_control(Source s, int fd);
    void set_timer(double seconds);
    // Arms one poll per ring (all mapped: seed 000) and the tick, and submits them.
    void arm();

    // Drains the rings until control asks to stop, every ring has hung up, or a write fails.
    StopCause run();
    // Once the source has stopped: passes until every ring is empty (or a write failed).
    void drain_rest();
    // Sends everything staged so far to the file, padded to a 4 KiB boundary (so the file's writers
    // stay O_DIRECT-aligned). With -z what is being compressed goes too, so request_flush() only
    // starts it and the loop finishes it; flush_pending() is false once every byte staged before
    // the request is queued for writing. flush() does it all and waits for every write.
    void request_flush();
    bool flush_pending() const { return flush_pending_; }
    void flush();
    // Rotation: after a completed flush (everything staged so far is queued for the current
    // file), the stream goes on in `file` at offsets from `space`. The sample time range starts again.
    void switch_output(OutputFile& file, FileSpace& space);

    // CPU hotplug: drains ring `i` to its last record and stops watching it, before the source
    // replaces it (RingSource::reopen); then adopt_ring() takes the new one. Counts carry over.
    // Not from inside a loop callback.
    void release_ring(size_t i);
    void adopt_ring(size_t i);

    CollectorSnapshot snapshot() const;
    // Rounds (collector_thread.hpp): marks each ring's data_head now; drained_past_marks() is true
    // once every ring was drained past its mark, in one pass or over several when staging is short.
    void mark_heads();
    bool drained_past_marks() const;
    // A round was requested. On the quiet tick, one that comes about when the tick would does the
    // tick's work (the round flushes anyway) and moves the tick a period past the next round: an
    // idle collector wakes for the rounds only, which the session sends every quiet period.
    void round_requested();
    // Hands what the rings showed of mappings and sample addresses to the DsoRegistry.
    void hand_over_dsos();
    // --flight-recorder: hands the records of tasks and mappings copied so far to the inbox.
    void hand_over_sideband();
    // The newest and the oldest sample time its rings showed (0: none yet).
    uint64_t last_time() const;
    uint64_t first_time() const;

    // LoopHandler
    void on_ring(uint32_t ring, uint32_t which, int revents) override;
    void on_write(uint32_t slot, int res) override { writer_->on_completion(slot, res); }
    void on_source(Source s) override;
    // MmapObserver: the DSOs mapped executable, for the BUILD_ID feature.
    void on_exec_mapping(const MappedFile& m) override { new_maps_.push_back(m); }
    void on_process_exit(uint32_t pid) override { new_exits_.push_back(pid); }

private:
    struct RingState {
        const SourceRing* src = nullptr;
        RingReader reader;
        IdMap ids;
        uint32_t watching = 0;       // which of the ring's event fds is polled (0 = owner)
        bool retired = false;        // every fd hung up: no longer polled
        bool final_drained = false;  // retired and emptied
        bool released = false;       // between release_ring() and adopt_ring(): not drained
        uint64_t wakeups = 0;
        uint64_t mark = 0;           // data_head at the round's mark (mark_heads)
        std::vector<uint64_t> carried_dropped;  // per event, of the rings this one replaced
        RingCounters carried;        // counts of the rings this one replaced (CPU hotplug)
    };

    void init_ring(size_t i);

    bool pass();
    void flush_idle_staging();
    void retune_tick();  // at each tick: the quiet period while little comes (next_tick_seconds)
    void tick_work();    // what a tick does besides the idle flush (also a round's on the quiet tick)
    // Hands the full staging buffers on: to the writer, or with -z to the encoder thread, whose
    // finished records go to the encoded buffers and from there to the writer.
    void send_ready();
    // collector_pressure.cpp: after each pass, the headroom to the grader, and its grade applied.
    double headroom() const;
    bool grade_pass();  // true when the grade changed
    void apply_grade(const Grade& g);
    void set_rate(unsigned shift);
    // Progress of request_flush(): done once the encoder gave back every buffer handed over
    // before it (then the padded partial buffer is queued).
    void poll_flush();

    CollectorControl& control_;
    std::ostream& log_;
    double tick_seconds_, quiet_tick_seconds_;
    double tick_period_;          // the tick's period now (tick_seconds_ or quiet_tick_seconds_)
    uint64_t drained_at_tick_ = 0;  // drained_bytes() at the last tick
    std::chrono::steady_clock::time_point last_tick_at_ = std::chrono::steady_clock::now();
    std::vector<EventCounters> events_;  // before rings_: the readers point into it
    std::vector<uint32_t> stack_dumps_;  // likewise
    std::optional<PressureGrader> grader_;
    Grade applied_;                      // what the readers, encoder and events do now
    size_t applied_level_ = 0;
    PressureStats pressure_;
    std::vector<uint64_t> sample_freqs_;
    std::vector<bool> period_in_ns_;
    std::vector<uint64_t> period_bases_;  // per event: its period in ns where the reader reports it (hrtimer)
    bool verbose_ = false;
    WriteFault write_fault_;
    std::vector<RingState> rings_;
    std::unique_ptr<StagingPool> staging_;
    // -z: the buffers of COMPRESSED records (what the writer writes), and the encoder thread (after
    // staging_: it reads staging buffers until it is gone).
    std::unique_ptr<StagingPool> encoded_;
    std::unique_ptr<EncoderThread> encoder_;
    bool flush_pending_ = false, flush_again_ = false;
    std::optional<StagingBuffer> pending_partial_;  // a flush's partial buffer, until handed over
    uint64_t flush_target_ = 0;  // the encoder's hand-back count that completes the flush
    std::unique_ptr<Loop> loop_;
    std::optional<Writer> writer_;
    std::string fallback_reason_;
    int nice_ = 0;
    std::string nice_refused_;
    int realtime_ = 0;
    std::string realtime_refused_;
    uint64_t samples_placed_ = 0;  // -z: in the order the file gets them (a rotation's boundary)
    DsoRegistry* registry_ = nullptr;
    std::unique_ptr<SampleHits> hits_;   // with registry_: sample pages since the last hand-over
    std::vector<MappedFile> new_maps_;  // mappings since the last hand-over
    std::vector<uint32_t> new_exits_;   // processes that exited since
    SidebandInbox* sideband_inbox_ = nullptr;
    std::vector<std::byte> sideband_;   // with sideband_inbox_: records since the last hand-over

    size_t start_ = 0;  // the ring each pass starts at (see pass())
    size_t live_rings_ = 0;
    bool tick_ = false;
    bool stopping_ = false;
    uint64_t hangups_ = 0, waits_at_all_hung_up_ = 0;
};

}  // namespace ringcap
