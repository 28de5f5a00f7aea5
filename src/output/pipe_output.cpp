#include "ringcap/pipe_output.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <iomanip>
#include <ostream>
#include <poll.h>
#include <sstream>
#include <pthread.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ringcap/process.hpp"
#include "ringcap/recorder.hpp"

namespace ringcap {

namespace {

constexpr uint64_t kSendChunk = 4ull << 20;   // one sendfile at most: the streamer looks at abort_ between
constexpr uint64_t kPunchEvery = 2ull << 20;  // free the memfd's pages behind the reader in steps this big
// Interrupts the streamer's blocking sendfile when finish() abandons a reader that takes nothing.
constexpr int kWakeSignal = SIGURG;

void on_wake(int) {}

bool is_pipe_arg(const std::string& a, const std::string& next, bool* consumed) {
    *consumed = false;
    if (a == "--output=-" || a == "-o-") return true;
    if ((a == "-o" || a == "--output") && next == "-") {
        *consumed = true;
        return true;
    }
    return false;
}

}  // namespace

bool pipe_output_in(const std::vector<std::string>& args) {
    bool pipe = false;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--") break;
        bool consumed = false;
        const std::string next = i + 1 < args.size() ? args[i + 1] : "";
        // The last -o wins, as in the option parser.
        if (args[i] == "-o" || args[i] == "--output" || args[i].rfind("--output=", 0) == 0 ||
            (args[i].rfind("-o", 0) == 0 && args[i].size() > 2))
            pipe = is_pipe_arg(args[i], next, &consumed);
        if (consumed || args[i] == "-o" || args[i] == "--output") ++i;
    }
    return pipe;
}

StdoutClaim StdoutClaim::take() {
    struct stat st{};
    if (::fstat(STDOUT_FILENO, &st) != 0)
        throw Error("-o -: stdout is closed; pipe ringcap into perf report -i - (or give a file with -o)");
    if (::isatty(STDOUT_FILENO))
        throw Error("-o -: stdout is a terminal; pipe it into a reader, e.g. ringcap record -a -o - | perf report -i -");
    StdoutClaim c;
    c.saved_.reset(::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3));
    if (!c.saved_) throw Error("-o -: cannot duplicate stdout: " + errno_text(errno));
    // From here on fd 1 is stderr: the recorded command inherits that, not the stream.
    if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) throw Error("-o -: cannot redirect stdout: " + errno_text(errno));
    return c;
}

StdoutClaim::~StdoutClaim() {
    if (saved_) ::dup2(saved_.get(), STDOUT_FILENO);
}

uint64_t PipeOutput::default_backlog_cap() {
    uint64_t avail = 0;
    if (const auto text = read_text_file("/proc/meminfo")) {
        const auto at = text->find("MemAvailable:");
        if (at != std::string::npos) avail = std::strtoull(text->c_str() + at + 13, nullptr, 10) * 1024;
    }
    return std::clamp<uint64_t>(avail / 4, 64ull << 20, 1ull << 30);
}

PipeOutput::PipeOutput(int out, std::vector<AttrEntry> attrs, std::vector<std::byte> head, int stop_fd,
                       std::ostream& log, uint64_t backlog_cap)
    : out_(out), file_(OutputFile::in_memory("-")), attrs_(std::move(attrs)), head_(std::move(head)),
      stop_fd_(stop_fd), log_(log), cap_(backlog_cap ? backlog_cap : default_backlog_cap()) {
    struct stat st{};
    stdout_pipe_ = ::fstat(out_, &st) == 0 && S_ISFIFO(st.st_mode);
    // No SA_RESTART: the signal makes a blocking sendfile return (EINTR or a short count).
    struct sigaction sa{};
    sa.sa_handler = on_wake;
    ::sigaction(kWakeSignal, &sa, &old_wake_);
}

PipeOutput::~PipeOutput() {
    stop_streamer();
    ::sigaction(kWakeSignal, &old_wake_, nullptr);
}

void PipeOutput::stop_streamer() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard lock(mu_);
        final_ = true;
    }
    abort_ = true;
    cv_.notify_all();
    while (!done_) {
        ::pthread_kill(thread_.native_handle(), kWakeSignal);
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return done_.load(); });
    }
    thread_.join();
}

void PipeOutput::publish(uint64_t data_size) {
    {
        std::lock_guard lock(mu_);
        limit_ = data_size;
    }
    thread_ = std::thread([this] { stream(); });
}

void PipeOutput::refresh_header(uint64_t durable) {
    {
        std::lock_guard lock(mu_);
        if (durable <= limit_) return;
        limit_ = durable;
    }
    cv_.notify_all();
    peak_backlog_ = std::max(peak_backlog_, durable - std::min(durable, sent_.load()));
}

int PipeOutput::write_block(uint64_t offset, const void* p, size_t len) {
    return pwrite_full(file_.buffered_fd(), p, len, offset);
}

void PipeOutput::add_ids(size_t event_index, const std::vector<uint64_t>& ids) {
    auto& list = attrs_.at(event_index).ids;
    list.insert(list.end(), ids.begin(), ids.end());
}

uint64_t PipeOutput::last_record_end(uint64_t from, uint64_t) const {
    // A write into memory failed (the memory limit): keep what is known to be whole.
    return from;
}

void PipeOutput::fail(int err) {
    int none = 0;
    err_.compare_exchange_strong(none, err);
}

bool PipeOutput::wait_writable() {
    // stdout may be non-blocking (inherited): wait for room, or for finish() to give up.
    pollfd p{out_, POLLOUT, 0};
    while (!abort_) {
        const int r = ::poll(&p, 1, 100);
        if (r > 0 || (r < 0 && errno != EINTR)) return true;
    }
    return false;
}

bool PipeOutput::send_head() {
    size_t done = 0;
    while (done < head_.size()) {
        if (abort_) return false;
        const ssize_t n = ::write(out_, head_.data() + done, head_.size() - done);
        if (n > 0) {
            done += size_t(n);
        } else if (n < 0 && errno == EAGAIN) {
            if (!wait_writable()) return false;
        } else if (n < 0 && errno != EINTR) {
            fail(errno);
            return false;
        }
    }
    return true;
}

bool PipeOutput::send_data(uint64_t end) {
    uint64_t sent = sent_.load();
    while (sent < end) {
        if (abort_) return false;
        off_t off = off_t(sent);
        const ssize_t n = ::sendfile(out_, file_.buffered_fd(), &off, size_t(std::min(end - sent, kSendChunk)));
        if (n > 0) {
            sent += uint64_t(n);
            sent_.store(sent);
        } else if (n < 0 && errno == EAGAIN) {
            if (!wait_writable()) return false;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            fail(n < 0 ? errno : EIO);  // 0: the memfd ended before `end`, which cannot happen
            return false;
        }
        // The reader has these bytes: give their pages back (the memfd keeps its size).
        const uint64_t upto = sent & ~uint64_t(page_size() - 1);
        if (upto - punched_ >= kPunchEvery) {
            ::fallocate(file_.buffered_fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(punched_),
                        off_t(upto - punched_));
            punched_ = upto;
        }
    }
    return true;
}

void PipeOutput::stream() {
    // Behind busy CPUs, a streamer at the workload's priority lets the backlog grow. Refused (no
    // CAP_SYS_NICE), it stays at ringcap's own: the collectors' -v line already says why.
    if (stream_nice_ != 0) (void)set_thread_nice(stream_nice_);
    // SIGPIPE is ignored for the whole record (SignalBlock): a gone reader is an EPIPE here.
    if (send_head()) {
        for (;;) {
            uint64_t end;
            bool last;
            {
                std::unique_lock lock(mu_);
                while (!cv_.wait_for(lock, std::chrono::milliseconds(200),
                                     [this] { return limit_ > sent_.load() || final_ || abort_; })) {
                    // Nothing to send (an idle capture): still notice a reader that went away (a pipe's
                    // write end reports POLLERR once its read end is closed).
                    pollfd p{out_, 0, 0};
                    if (::poll(&p, 1, 0) > 0 && (p.revents & POLLERR)) {
                        fail(EPIPE);
                        abort_ = true;
                    }
                }
                end = limit_;
                last = final_;
            }
            if (!send_data(end)) break;
            if (last && sent_.load() >= end) break;
        }
    }
    {
        std::lock_guard lock(mu_);
        done_ = true;
    }
    cv_.notify_all();
}

std::string PipeOutput::stop_reason() const {
    if (const int err = err_.load())
        return err == EPIPE ? "the pipe reader went away" : "writing stdout failed: " + errno_text(err);
    if (peak_backlog_ > cap_) return "the pipe reader could not keep up";
    return "";
}

std::string PipeOutput::finish(uint64_t data_size, const HostInfo&, const std::vector<EventSpec>&,
                               const std::vector<BuildIdEntry>*, const CompressionFeature*, const SampleTimeRange*) {
    {
        std::lock_guard lock(mu_);
        limit_ = std::max(limit_, data_size);
        final_ = true;
    }
    cv_.notify_all();
    peak_backlog_ = std::max(peak_backlog_, data_size - std::min(data_size, sent_.load()));
    bool abandoned = false;
    if (thread_.joinable()) {
        // Wait for the reader to take the rest; a stop signal (a second Ctrl-C, a scheduler's SIGTERM)
        // abandons it.
        for (;;) {
            {
                std::unique_lock lock(mu_);
                if (cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return done_.load(); })) break;
            }
            pollfd p{stop_fd_, POLLIN, 0};
            if (!abandoned && stop_fd_ >= 0 && ::poll(&p, 1, 0) > 0) {
                signalfd_siginfo si{};
                [[maybe_unused]] const ssize_t r = ::read(stop_fd_, &si, sizeof si);  // consumed: not fatal later
                abandoned = true;
                abort_ = true;
                cv_.notify_all();
            }
            if (abort_) ::pthread_kill(thread_.native_handle(), kWakeSignal);
        }
        thread_.join();
    }
    const uint64_t sent = sent_.load();
    const int err = err_.load();
    std::ostringstream o;
    if (sent < data_size || err) {
        o << (err == EPIPE     ? std::string("the pipe reader went away")
              : err            ? "writing stdout failed: " + errno_text(err)
              : abandoned      ? std::string("a stop signal abandoned the reader")
                               : std::string("the stream ended early"))
          << ": it took " << human_bytes(sent) << " of " << human_bytes(data_size) << " of data; "
          << human_bytes(data_size - std::min(data_size, sent)) << " captured were not delivered";
        error_ = o.str();
    } else if (peak_backlog_ > cap_) {
        error_ = "the pipe reader could not keep up: " + human_bytes(peak_backlog_) +
                 " were waiting to be sent (the limit is " + human_bytes(cap_) +
                 "), so the capture stopped early; everything captured was delivered. Use a faster reader, "
                 "a lower rate (-F), a bigger --pipe-backlog, or record to a file";
    }
    log_ << "ringcap: pipe: sent " << human_bytes(head_.size()) << " of header records and " << human_bytes(sent)
         << " of data to stdout" << (stdout_pipe_ ? " (a pipe)" : "") << "; peak backlog "
         << human_bytes(peak_backlog_) << " (limit " << human_bytes(cap_) << ")\n";
    if (!error_.empty()) log_ << "ringcap: ERROR: " << error_ << "\n";
    return "";
}

uint64_t PipeOutput::data_kept(uint64_t data_size) const { return std::min(data_size, sent_.load()); }

PipeStats PipeOutput::stats() const {
    PipeStats s;
    s.sent = sent_.load();
    s.head_bytes = head_.size();
    s.peak_backlog = peak_backlog_;
    s.cap = cap_;
    return s;
}

}  // namespace ringcap
