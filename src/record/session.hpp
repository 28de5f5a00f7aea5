// The record session (internal to src/record): the coordinator on the main thread. It plans, opens
// the source, starts the collector threads, writes what is the session's own in the file (the
// records of what already runs, FINISHED_ROUND markers, LOST_SAMPLES, the crash-safe header), decides
// when to stop, and finishes the file. session.cpp has the phases, session_loop.cpp the loop,
// session_end.cpp the stop and the finish.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "ringcap/collector_thread.hpp"
#include "ringcap/control_channel.hpp"
#include "ringcap/dsos.hpp"
#include "ringcap/file_output.hpp"
#include "ringcap/hotplug.hpp"
#include "ringcap/main_wake.hpp"
#include "ringcap/pipe_output.hpp"
#include "ringcap/plan.hpp"
#include "ringcap/process.hpp"
#include "ringcap/recorder.hpp"
#include "ringcap/sideband_state.hpp"
#include "ringcap/window_dump.hpp"
#include "ringcap/window_output.hpp"

namespace ringcap {

class Session {
public:
    Session(const RecordOptions& o, std::ostream& log, SignalBlock& signals, Command* command);
    ~Session();
    int run(RingSource& source, RecordSummary& sum);
    // -o -: the stream goes to `fd` (a StdoutClaim's) in perf's pipe format (pipe_output.hpp).
    void set_pipe(int fd) { pipe_fd_ = fd; }

private:
    using Clock = std::chrono::steady_clock;

    // session.cpp
    std::vector<AttrEntry> attr_entries(const std::vector<perf_event_attr>& attrs) const;
    void start_collectors(const RecordPlan& plan, const std::vector<perf_event_attr>& attrs);
    void print_setup(const RecordPlan& plan, size_t ring_pages) const;
    void write_start();
    // The records of what runs now (COMM/MMAP2/FORK, the kernel's maps, FINISHED_INIT), written to
    // the current file: at the start, and at the start of every rotated file (`next_file`).
    void write_start_records(bool next_file = false);
    void write_own(std::vector<std::byte>& bytes, bool pad);
    // Reserves `len` bytes of the data section and writes them there (synchronously, on this thread):
    // the end offset, or 0 after a failure (write_error_ set).
    uint64_t write_reserved(const void* p, size_t len);
    // Writes whole records at reserved offsets, padded to 4 KiB. With -z the padding is a compression
    // anchor, so that the records' end becomes a data size the crash-safe header can name. The end
    // of the block, or 0 after a failure; its offset in `*at` if asked.
    uint64_t write_records(std::vector<std::byte>& bytes, uint64_t* at = nullptr);
    // What the crash-safe header says the data size is: everything on disk below durable_end(), or
    // with -z up to the newest anchor below it.
    uint64_t crash_safe_end();
    CompressionFeature compression_feature(const RecordSnapshot* s) const;
    void stop();
    void finish();
    // session_build_ids.cpp: the BUILD_ID list of the DSOs samples hit so far (read within a bound,
    // saying what was skipped), and adding them to the build-id cache.
    std::vector<BuildIdEntry> build_id_list();
    // The host's features for a finished file: HostInfo::current, its BPF programs merged into
    // bpf_seen_ and described from there (a program unloaded since the start stays, as with perf).
    HostInfo host_info();
    void cache_build_ids(const std::vector<BuildIdEntry>& build_ids);
    RecordSnapshot snapshot() const;
    uint64_t durable_end() const;  // file offset below which the data is on disk, at a record boundary

    // session_pipe.cpp (-o -)
    std::unique_ptr<RecordOutput> make_pipe_output(size_t staging_buffer_bytes, const std::vector<perf_event_attr>& attrs);
    // Before a reopened ring's records can reach the stream: HEADER_ATTR records for its new ids.
    void announce_ids(size_t ring);

    // --switch-output and --max-size are for files (refused with -o -): the output is a FileOutput.
    FileOutput& file_output() const { return static_cast<FileOutput&>(*output_); }
    // session_rotate.cpp: --switch-output and --max-size
    bool rotating() const { return opts_.switch_output.mode != SwitchOutput::Mode::None; }
    // The data space of a new file: preallocated ahead (O_DIRECT writes then run inline), bounded
    // by --max-size.
    std::unique_ptr<FileSpace> make_space(const RecordOutput& out);
    void limit_space(FileSpace& space, const RecordOutput& out);
    bool switch_due() const;
    void begin_switch();     // the next file, and the round at which the collectors move to it
    void rotate();           // every collector moved: the next file is the current one
    void rotation_step();    // finishes the previous file once its writes all completed
    // The tasks of the switch that the next file's /proc scan no longer found (`present`: the ones
    // it found), from sideband_; at the first file's start, its start records seed sideband_.
    void carry_tasks(std::vector<std::byte>& start, const TaskSet& present, bool next_file);
    void fold_tasks();       // at each round marker: sideband_ kept to what it must hold
    void finish_previous();
    // Publishes the current file, saying what it moved aside (OutputFile::take_notes).
    void publish_output();
    // Names a finished file as perf does (<out>.<YYYYmmddHHMMSScc>), keeps --switch-max-files.
    void name_finished(OutputFile& file, uint64_t data_size, std::optional<uint64_t> samples, const std::string& note = "");
    // --max-size: what must fit after the data (features, ids, LOST_SAMPLES, round markers).
    uint64_t max_size_tail(const FileOutput& out) const;

    // session_window.cpp: --flight-recorder (window_output.hpp)
    bool flight() const { return opts_.flight_recorder_s > 0; }
    WindowOutput& window() const { return static_cast<WindowOutput&>(*output_); }
    uint64_t window_bound() const;            // the window's memory bound (--flight-recorder-size, or derived)
    void keep_start_records(std::vector<std::byte>& start);  // into start_head_ and sideband_
    void window_marker(uint64_t end);         // a round marker ends at `end`: the window may start there
    void trim_window();                       // to its duration and its memory bound
    void take_sideband();                     // the collectors' records of tasks and mappings
    // Writes the window as a file of its own (named as --switch-output's files); false if it failed
    // (said on the log). `trigger` for the summary.
    bool dump(const std::string& trigger);
    // A dump asked for (SIGUSR2, the control FIFO): done once the next round's marker is written,
    // so that it holds everything the rings held when it was asked for.
    struct WantedDump {
        std::string trigger;
        bool ack;  // the control FIFO's: acknowledged once the file is complete
    };
    std::vector<WantedDump> wanted_dumps_;
    void dump_wanted();
    void finish_window();                     // the end's dump, unless the command ran clean with --flight-recorder-on-failure
    // --control: the commands that arrived, done and acknowledged; false when one asks to stop.
    bool serve_control();

    // session_loop.cpp
    void wait_for_stop();
    MainWake wake_plan(Clock::time_point now, Clock::time_point last_hotplug);
    uint64_t header_target();  // the data size the crash-safe header is kept at
    MainWake::Clock::duration quiet_spacing() const;  // rounds while little data comes
    bool rounds_by_time() const;                       // a round every quiet_spacing(), new data or not
    void round();
    void follow_hotplug();
    bool replace_ring(size_t ring);

    const RecordOptions& opts_;
    std::ostream& log_;
    SignalBlock& signals_;
    Command* command_;
    const bool per_task_;
    RingSource* source_ = nullptr;
    std::vector<EventSpec> specs_;
    std::unique_ptr<RecordOutput> output_;  // before the collectors: their writers refer to the file
    int pipe_fd_ = -1;                      // -o -: stdout, taken
    std::unique_ptr<FileSpace> space_;
    std::string error_;                    // the write error the record ended with, for the summary
    // The live status line (stderr a terminal): when it was printed, the counts then.
    void print_status();
    void clear_status();
    Clock::time_point last_status_{};
    uint64_t status_samples_ = 0, status_bytes_ = 0;
    bool status_shown_ = false;
    UniqueFd done_fd_;                     // collectors that end on their own say so here
    DsoRegistry dsos_;  // BUILD_ID: the mappings and sample pages the collectors hand over (outlives them)
    std::vector<std::unique_ptr<CollectorThread>> collectors_;
    // Bytes this record's copies take in the build-id cache, shared with its passes' workers (one
    // given up on may still be finishing a chunk): against --buildid-cache-max for all files together.
    std::shared_ptr<std::atomic<uint64_t>> cache_copied_ = std::make_shared<std::atomic<uint64_t>>(0);
    SynthesisStats synth_;
    BpfInfo bpf_seen_;  // every BPF program loaded at a file's start or end so far (BPF_PROG_INFO)
    std::vector<uint64_t> event_lost_samples_;
    bool lost_read_ = false;  // event_lost_samples_ holds the kernel's per-event counts (after stop)
    uint64_t lost_samples_ = 0;
    uint64_t file_bytes_ = 0;
    uint64_t unwritten_bytes_ = 0;  // data that did not reach the file or the pipe's reader
    int write_error_ = 0;  // a write of the session's own failed
    Clock::time_point t0_{};
    std::optional<Clock::time_point> deadline_;
    double seconds_ = -1;  // capture time, set at stop; until then snapshot() measures
    std::string stop_reason_;
    HotplugWatch hotplug_;
    CpuUevents uevents_;  // system-wide: hotplug as it happens (none: checked every second)
    // -z: the anchors written (data end, block end), oldest first; the first one is on disk.
    std::deque<std::pair<uint64_t, uint64_t>> anchors_;
    size_t staging_buffer_bytes_ = 0;
    uint64_t headroom_ = 0;  // ring and staging bytes: what may still arrive once the record stops

    // Rotation: the next file while the collectors move to it, the previous one while its writes end.
    std::unique_ptr<FileOutput> next_output_, prev_output_;
    std::unique_ptr<FileSpace> next_space_, prev_space_;
    uint64_t switch_round_ = 0;          // the round the collectors switch at (0: none under way)
    uint64_t switched_round_ = 0;        // the last one they switched at
    bool switch_wanted_ = false;         // SIGUSR2 arrived
    bool rotation_failed_ = false;
    Clock::time_point file_started_{};
    std::vector<uint64_t> samples_at_switch_;  // per collector, its sample count at the last switch
    std::vector<std::string> files_;           // finished files still on disk, oldest first
    // With rotation, the collectors' newest sample time: at the last marker (sideband_ is folded up to
    // it at the next one), and when the switch was asked for.
    uint64_t tasks_time_ = 0, switch_time_ = 0;

    // --flight-recorder: where the window may start (after each round marker: its file offset, when,
    // and the newest record time the collectors had reported by then), the oldest first; the state of
    // tasks and mappings as of the window's start (with --switch-output, as of the last marker, and the
    // records since); the start records that are neither; the dumps.
    struct WindowMark {
        uint64_t offset;
        Clock::time_point at;
        uint64_t time;
    };
    std::deque<WindowMark> marks_;
    SidebandInbox sideband_inbox_;
    SidebandState sideband_;
    std::vector<std::byte> start_head_;
    std::vector<DumpInfo> dumps_;
    DumpCounter dump_counter_;
    mutable uint64_t window_bound_ = 0;  // window_bound(), once read
    bool window_shrunk_ = false;
    bool dumps_failed_ = false;
    bool stopped_ = false;                           // finish_window() began
    std::pair<double, uint64_t> window_end_{0, 0};  // the window at the end: seconds, bytes  // the memory bound, not the duration, set the window's start at least once
    ControlChannel control_;

    // FINISHED_ROUND: marker k is written once every collector acknowledged round k.
    uint64_t round_ = 0;        // the round requested last (0: none)
    uint64_t rounds_ = 0;       // rounds completed (requests are numbered on from it)
    uint64_t markers_ = 0;      // markers written (a round that found nothing new writes none)
    // The collectors' quiet tick rides on the rounds (collector.hpp: round_requested): a round is
    // requested every quiet period even with no new data seen, and the collectors flush for it.
    bool rounds_tick_ = false;
    bool round_written_ = false;  // the round requested last waits for its writes (a quiet one)
    uint64_t round_end_ = 0;      // the data's end when the last round completed
    double quiet_rate_ = 0;       // bytes a second that came before the last quiet round (0: none yet)
    uint64_t round_data_ = 0;   // the data's end when the last round was requested, then past its marker
    Clock::time_point last_round_{};
    std::pair<uint64_t, uint64_t> marker_span_{};  // the last marker's block: [offset, end)
};

}  // namespace ringcap
