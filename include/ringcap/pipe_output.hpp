// Pipe mode (`-o -`): perf's pipe format on stdout, for `ringcap record -o - | perf report -i -`.
//
// The write path stays the file's: the collectors' Writers write staging buffers at offsets
// reserved in a FileSpace, the session writes its own records the same way. Only the file is a
// memfd (no O_DIRECT, no preallocation, nothing to publish). A streamer thread sends the data in
// order, up to what the session last reported as durable (every byte below it written, a record
// boundary), with sendfile from the memfd, and punches holes behind it, so memory holds only the
// backlog: what is captured but not yet taken by the reader. Before the data go the pipe header,
// the HEADER_ATTR, HEADER_FEATURE and (tracepoints) HEADER_TRACING_DATA records (build_pipe_head).
//
// A reader slower than the capture makes the backlog grow; beyond a cap the record stops (nothing
// captured is dropped: the backlog is still delivered). A reader that goes away (EPIPE) stops it
// too; what it did not take is counted. Either makes the exit status 1.
#pragma once

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ringcap/record_output.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

// Whether the arguments of `ringcap record` ask for `-o -` (before `--`; for main(), which must not
// write a JSON summary to stdout then, even on bad usage).
bool pipe_output_in(const std::vector<std::string>& args);

// stdout, taken for the stream: fd 1 moves to a private descriptor (close-on-exec) and fd 1 then
// points at stderr, so that neither the recorded command nor a stray print can write into the perf
// data. Restores fd 1 when destroyed.
class StdoutClaim {
public:
    // Throws Error (exit status 2) when stdout is closed or a terminal (binary data on a terminal is
    // never what was meant).
    static StdoutClaim take();
    StdoutClaim(StdoutClaim&&) = default;
    StdoutClaim& operator=(StdoutClaim&&) = delete;
    ~StdoutClaim();
    int fd() const { return saved_.get(); }

private:
    StdoutClaim() = default;
    UniqueFd saved_;
};

struct PipeStats {
    uint64_t sent = 0;          // data bytes the reader took (after the head)
    uint64_t head_bytes = 0;    // pipe header, attrs, features, tracing data
    uint64_t peak_backlog = 0;  // most data bytes captured and not yet sent, as seen by refresh_header
    uint64_t cap = 0;           // the backlog beyond which the record stops
};

class PipeOutput final : public RecordOutput {
public:
    // Streams to `out` (borrowed: a StdoutClaim's). `head` is build_pipe_head's. `stop_fd` (the
    // record's signalfd) is watched while finish() waits for a slow reader: a stop signal then
    // abandons the rest. `backlog_cap` 0 = the default (default_backlog_cap()).
    PipeOutput(int out, std::vector<AttrEntry> attrs, std::vector<std::byte> head, int stop_fd, std::ostream& log,
               uint64_t backlog_cap = 0);
    ~PipeOutput() override;

    // The default cap: a quarter of MemAvailable, between 64 MiB and 1 GiB.
    static uint64_t default_backlog_cap();

    OutputFile& file() override { return file_; }
    const OutputFile& file() const override { return file_; }
    uint64_t data_offset() const override { return 0; }
    // The streamer's nice value (best effort), the collectors' by default: set before publish().
    void set_stream_nice(int nice) { stream_nice_ = nice; }
    // Starts the streamer: the head, then the data up to `data_size`.
    void publish(uint64_t data_size) override;
    // More data may be sent: up to `durable`.
    void refresh_header(uint64_t durable) override;
    void set_crash_features(const uint64_t (&)[4]) override {}
    int write_block(uint64_t offset, const void* p, size_t len) override;
    // Only noted: the session already put them in the stream (Session::announce_ids).
    void add_ids(size_t event_index, const std::vector<uint64_t>& ids) override;
    uint64_t last_record_end(uint64_t from, uint64_t to) const override;
    // Sends the rest (up to `data_size`) and waits for the reader to take it, or to go away, or for
    // a stop signal. Prints what was delivered. Returns "" (nothing of the features is missing:
    // they went first).
    std::string finish(uint64_t data_size, const HostInfo& host, const std::vector<EventSpec>& specs,
                       const std::vector<BuildIdEntry>* build_ids, const CompressionFeature* compression = nullptr,
                       const SampleTimeRange* sample_time = nullptr) override;
    std::string stop_reason() const override;
    std::string error() const override { return error_; }
    uint64_t data_kept(uint64_t data_size) const override;

    PipeStats stats() const;
    const std::vector<AttrEntry>& attrs() const override { return attrs_; }

private:
    void stream();  // the streamer thread
    int stream_nice_ = 0;
    bool send_head();
    bool send_data(uint64_t end);
    bool wait_writable();
    void fail(int err);
    void stop_streamer();  // abandons what is not sent yet

    int out_;
    OutputFile file_;
    std::vector<AttrEntry> attrs_;
    std::vector<std::byte> head_;
    int stop_fd_;
    std::ostream& log_;
    uint64_t cap_;
    uint64_t peak_backlog_ = 0;
    std::string error_;
    bool stdout_pipe_ = false;
    struct sigaction old_wake_{};  // the wake-up signal's disposition before us, restored at the end

    std::mutex mu_;
    std::condition_variable cv_;
    uint64_t limit_ = 0;   // may be sent up to here (guarded by mu_)
    bool final_ = false;   // limit_ is the end of the data (guarded by mu_)
    std::atomic<uint64_t> sent_{0};
    uint64_t punched_ = 0;  // holes punched below here (streamer only)
    std::atomic<int> err_{0};      // the stream's write error (EPIPE: the reader went away)
    std::atomic<bool> abort_{false};
    std::atomic<bool> done_{false};
    std::thread thread_;
};

}  // namespace ringcap
