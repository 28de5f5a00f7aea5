#include "ringcap/recorder.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <iomanip>
#include <memory>
#include <ostream>
#include <poll.h>
#include <set>
#include <sstream>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ringcap/events.hpp"
#include "ringcap/perf_data.hpp"
#include "ringcap/staging.hpp"
#include "ringcap/synthesize.hpp"
#include "ringcap/synthetic.hpp"
#include "ringcap/loop.hpp"
#include "ringcap/writer.hpp"

namespace ringcap {

namespace {

using Clock = std::chrono::steady_clock;

// Period of the housekeeping tick: idle staging goes to disk and the header is refreshed at least
// this often, which bounds what a crash can lose to about this much of data.
constexpr double kTickSeconds = 0.5;
// Minimum spacing of FINISHED_ROUND markers (see Session::round_due).
constexpr std::chrono::milliseconds kMinRound{100};
// Smallest ring the recorder falls back to when locked memory is short (16 KiB).
constexpr size_t kMinRingPages = 4;

// Raises RLIMIT_NOFILE's soft limit to the hard one if `events` fds would not fit.
void ensure_fd_limit(size_t events) {
    const size_t need = events + 64;  // signalfd, pidfd, output, io_uring, stdio...
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || need <= rl.rlim_cur) return;
    if (rl.rlim_max != RLIM_INFINITY && need > rl.rlim_max)
        throw Error("recording needs " + std::to_string(need) + " file descriptors but RLIMIT_NOFILE's hard limit is " +
                    std::to_string(rl.rlim_max) + ": raise it (ulimit -Hn, limits.conf) or record fewer CPUs, "
                    "events or tasks");
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        throw Error("cannot raise RLIMIT_NOFILE to " + std::to_string(rl.rlim_max) + ": " + errno_text(errno));
}

// Blocks the stop signals for the whole record so they arrive through a signalfd on the io_uring,
// and so a second Ctrl-C during the final flush cannot interrupt it. Restores the mask on exit.
class SignalBlock {
public:
    SignalBlock() {
        sigemptyset(&set_);
        sigaddset(&set_, SIGINT);
        sigaddset(&set_, SIGTERM);
        sigaddset(&set_, SIGHUP);
        sigprocmask(SIG_BLOCK, &set_, &old_);
        int fd = signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK);
        if (fd < 0) throw Error("signalfd: " + errno_text(errno));
        fd_.reset(fd);
    }
    ~SignalBlock() { sigprocmask(SIG_SETMASK, &old_, nullptr); }
    SignalBlock(const SignalBlock&) = delete;
    SignalBlock& operator=(const SignalBlock&) = delete;
    int fd() const { return fd_.get(); }
    const sigset_t& old_mask() const { return old_; }
    // Name of a pending stop signal, consumed.
    std::string take() {
        signalfd_siginfo si{};
        if (::read(fd_.get(), &si, sizeof si) != ssize_t(sizeof si)) return "signal";
        const char* n = sigabbrev_np(int(si.ssi_signo));
        return std::string("SIG") + (n ? n : "?");
    }

private:
    sigset_t set_{}, old_{};
    UniqueFd fd_;
};

std::string find_executable(const std::string& cmd) {
    if (cmd.find('/') != std::string::npos) return access(cmd.c_str(), X_OK) == 0 ? cmd : "";
    const char* path = getenv("PATH");
    std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
    size_t pos = 0;
    while (pos <= p.size()) {
        size_t colon = p.find(':', pos);
        std::string dir = p.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
        std::string full = (dir.empty() ? "." : dir) + "/" + cmd;
        struct stat st{};
        if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(full.c_str(), X_OK) == 0) return full;
        if (colon == std::string::npos) break;
        pos = colon + 1;
    }
    return "";
}

// The recorded command: forked early, held on a pipe until the events are enabled (as perf does),
// watched through a pidfd on the io_uring.
class Child {
public:
    Child(const std::vector<std::string>& cmd, const sigset_t& mask) {
        std::string exe = find_executable(cmd[0]);
        if (exe.empty()) throw Error("cannot run '" + cmd[0] + "': not found or not executable (check PATH)");
        int go[2];
        if (pipe2(go, O_CLOEXEC) != 0) throw Error("pipe: " + errno_text(errno));
        std::vector<char*> argv;
        for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        pid_ = fork();
        if (pid_ < 0) {
            ::close(go[0]);
            ::close(go[1]);
            throw Error("fork: " + errno_text(errno));
        }
        if (pid_ == 0) {
            sigprocmask(SIG_SETMASK, &mask, nullptr);
            ::close(go[1]);
            char c;
            // EOF without a byte means the recorder gave up: do not run the command.
            if (::read(go[0], &c, 1) != 1) _exit(127);
            execv(exe.c_str(), argv.data());
            dprintf(2, "ringcap: cannot run '%s': %s\n", exe.c_str(), strerror(errno));
            _exit(127);
        }
        ::close(go[0]);
        go_.reset(go[1]);
        int pfd = int(syscall(SYS_pidfd_open, pid_, 0));
        if (pfd < 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
            throw Error("pidfd_open: " + errno_text(errno) + " (needs Linux 5.3)");
        }
        pidfd_.reset(pfd);
    }
    ~Child() {
        if (pid_ > 0 && !reaped_) {
            go_.reset();
            terminate();
        }
    }
    int pidfd() const { return pidfd_.get(); }
    int pid() const { return pid_; }
    void start() {
        char c = 1;
        if (::write(go_.get(), &c, 1) != 1) throw Error("cannot start the command: " + errno_text(errno));
        go_.reset();
    }
    // Stops the command if it is still running (perf sends SIGTERM too) and reaps it.
    int terminate() {
        if (reaped_) return status_;
        if (waitpid(pid_, &status_, WNOHANG) == 0) {
            kill(pid_, SIGTERM);
            waitpid(pid_, &status_, 0);
        }
        reaped_ = true;
        return status_;
    }

private:
    pid_t pid_ = -1;
    UniqueFd go_, pidfd_;
    bool reaped_ = false;
    int status_ = 0;
};

struct RingState {
    RingReader reader;
    IdMap ids;
    uint32_t watching = 0;       // which of the CPU's event fds is polled (0 = owner)
    bool retired = false;        // every fd hung up: no longer polled
    bool final_drained = false;  // retired and emptied
    uint64_t events = 0;         // readiness notifications
};

std::string human_bytes(uint64_t b) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(2);
    if (b >= (1ull << 30)) s << double(b) / double(1ull << 30) << " GiB";
    else if (b >= (1ull << 20)) s << double(b) / double(1ull << 20) << " MiB";
    else if (b >= (1ull << 10)) s << double(b) / double(1ull << 10) << " KiB";
    else s << b << " B";
    return s.str();
}

class Session final : public LoopHandler, public MmapObserver {
public:
    Session(const RecordOptions& o, std::ostream& log) : opts_(o), log_(log) {}
    int run(RecordSummary& sum);

    // LoopHandler
    void on_ring(uint32_t ring, uint32_t which, int revents) override;
    void on_write(uint32_t slot, int res) override { writer_->on_completion(slot, res); }
    void on_source(Source s) override;
    // MmapObserver: remember the DSOs mapped executable, for the BUILD_ID feature.
    void on_exec_mapping(const char* filename, bool kernel) override {
        if (!kernel && filename[0] == '/') dsos_.insert(filename);
    }

private:
    void validate_output() const;
    std::vector<int> resolve_cpus() const;
    std::vector<int> resolve_tasks() const;
    bool sweep(bool allow_round = true);
    void append_blocking(const void* p, size_t n);
    void finish_file(RecordSummary& sum);
    void refresh_header();
    void enable_tracking();
    void flush_idle_staging();
    bool round_due() const;
    void mark_round();
    void fill_summary(RecordSummary& sum) const;
    void print_summary(const RecordSummary& sum) const;

    const RecordOptions& opts_;
    std::ostream& log_;
    std::vector<CpuEvents> cpus_;
    // Declared after cpus_, so destroyed first: its producers write into the rings cpus_ holds.
    std::unique_ptr<SyntheticSource> synthetic_;
    std::vector<RingState> rings_;
    std::vector<EventCounters> event_counters_;
    std::vector<uint64_t> event_lost_samples_;
    std::vector<AttrEntry> attrs_;
    std::vector<EventSpec> specs_;  // opts_.events + the tracking event
    std::set<std::string> dsos_;    // executable file mappings seen (synthesized or recorded)
    SynthesisStats synth_;
    std::unique_ptr<SignalBlock> signals_;
    std::unique_ptr<Child> child_;
    std::unique_ptr<Loop> loop_;
    std::unique_ptr<StagingPool> staging_;
    std::unique_ptr<OutputFile> file_;
    std::unique_ptr<Writer> writer_;
    std::string fallback_reason_;
    uint64_t data_offset_ = 0;
    uint64_t published_size_ = 0;
    Clock::time_point published_at_{};
    size_t ring_pages_ = 0;
    bool per_task_ = false;
    bool tick_ = false;
    bool stop_ = false;
    bool stopping_ = false;
    std::string stop_reason_;
    uint64_t rounds_ = 0, hangups_ = 0, synth_records_ = 0;
    uint64_t unrounded_bytes_ = 0;  // drained since the last FINISHED_ROUND
    Clock::time_point last_round_{};
    uint64_t iterations_at_all_hung_up_ = 0;  // loop iterations when the last ring retired
    size_t live_rings_ = 0;
};

void Session::validate_output() const {
    // Refuse early, before any file is touched, if the output cannot be created.
    const std::string& out = opts_.output;
    auto slash = out.rfind('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
    struct stat st{};
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw Error("output directory '" + dir + "' does not exist (-o " + out + ")");
    if (access(dir.c_str(), W_OK) != 0)
        throw Error("output directory '" + dir + "' is not writable: " + errno_text(errno) + " (choose another -o)");
    if (stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw Error("output '" + out + "' is a directory: give a file name with -o");
    if (stat(out.c_str(), &st) == 0 && access(out.c_str(), W_OK) != 0)
        throw Error("output '" + out + "' is not writable: " + errno_text(errno) + " (choose another -o)");
}

std::vector<int> Session::resolve_cpus() const {
    std::vector<int> online = online_cpus();
    if (!opts_.cpus) return online;
    for (int c : *opts_.cpus)
        if (std::find(online.begin(), online.end(), c) == online.end()) {
            std::string list;
            for (int x : online) list += (list.empty() ? "" : ",") + std::to_string(x);
            throw Error("-C: CPU " + std::to_string(c) + " does not exist or is offline (online: " + list + ")");
        }
    return *opts_.cpus;
}

std::vector<int> Session::resolve_tasks() const {
    std::vector<int> tids;
    for (int pid : opts_.pids) {
        auto t = threads_of(pid);
        if (!t || t->empty()) throw Error("-p " + std::to_string(pid) + ": no such process");
        tids.insert(tids.end(), t->begin(), t->end());
    }
    for (int tid : opts_.tids) {
        struct stat st{};
        if (stat(("/proc/" + std::to_string(tid)).c_str(), &st) != 0)
            throw Error("-t " + std::to_string(tid) + ": no such thread");
        tids.push_back(tid);
    }
    std::sort(tids.begin(), tids.end());
    tids.erase(std::unique(tids.begin(), tids.end()), tids.end());
    return tids;
}

void Session::on_ring(uint32_t idx, uint32_t which, int revents) {
    RingState& r = rings_[idx];
    ++r.events;
    if (r.retired || which != r.watching) return;
    if (revents >= 0 && !(revents & (POLLHUP | POLLERR))) return;  // data: the next sweep drains it
    // This fd hung up (its task exited) or its poll failed. It is never polled again, so it cannot
    // make the loop spin (seed 000). Other events of the ring may still write into it: watch the next
    // one (a hung-up one reports POLLHUP at once and we move on). When none is left the ring is
    // retired; the next sweep drains what is left in it.
    CpuEvents& c = cpus_[idx];
    loop_->unwatch_ring(idx, which, c.events[which].fd.get());
    ++hangups_;
    if (revents < 0)
        log_ << "ringcap: poll on cpu " << c.cpu << " failed: " << errno_text(-revents) << "\n";
    if (!stopping_ && which + 1 < c.events.size()) {
        r.watching = which + 1;
        loop_->watch_ring(idx, r.watching, c.events[r.watching].fd.get(), c.ring);
        return;
    }
    r.retired = true;
    if (--live_rings_ == 0) iterations_at_all_hung_up_ = loop_->stats().iterations;
}

void Session::on_source(Source s) {
    if (stop_) return;
    switch (s) {
        case Source::Signal:
            stop_reason_ = signals_->take();
            stop_ = true;
            break;
        case Source::Child:
            // Per task, the record ends when every ring hung up (the command and all its children
            // exited); system-wide it ends with the command.
            if (!per_task_) {
                stop_reason_ = "command exited";
                stop_ = true;
            }
            break;
        case Source::Timer:
            stop_reason_ = "duration reached";
            stop_ = true;
            break;
        case Source::Tick:
            tick_ = true;
            break;
    }
}

bool Session::sweep(bool allow_round) {
    // A pass over every ring. Only a pass that emptied every ring may end with FINISHED_ROUND: perf
    // report sorts by time up to the previous round, which is only safe if no ring held older data.
    bool complete = true;
    uint64_t bytes = 0;
    for (auto& r : rings_) {
        if (r.final_drained) continue;
        DrainResult d = r.reader.drain(*staging_);
        bytes += d.bytes;
        complete &= d.complete;
        if (r.retired && d.complete) r.final_drained = true;
    }
    unrounded_bytes_ += bytes;
    if (allow_round && complete && unrounded_bytes_ > 0 && round_due()) {
        const perf_event_header fr = finished_round_record();
        if (staging_->append(&fr, sizeof fr)) mark_round();
        else complete = false;
    }
    return complete;
}

bool Session::round_due() const {
    // perf report flushes, at each FINISHED_ROUND, everything older than the newest event of the
    // previous round. Passes that follow each other within microseconds would make that boundary
    // finer than cross-CPU clock skew and record commit delays, and a late record would then be
    // "out of order". Rounds at least kMinRound apart keep a wide margin and bound perf's memory.
    return Clock::now() - last_round_ >= kMinRound;
}

void Session::mark_round() {
    ++rounds_;
    unrounded_bytes_ = 0;
    last_round_ = Clock::now();
}

void Session::append_blocking(const void* p, size_t n) {
    while (!staging_->append(p, n) && !writer_->failed()) {
        writer_->queue_ready();
        loop_->run_once(*this, true);
    }
}

int Session::run(RecordSummary& sum) {
    validate_output();
    const bool synthetic = opts_.synthetic.rings > 0;
    if (opts_.sampling.use_freq && !synthetic) {
        auto maxrate = read_sysctl("kernel/perf_event_max_sample_rate");
        if (maxrate && opts_.sampling.freq > uint64_t(*maxrate))
            throw Error("-F " + std::to_string(opts_.sampling.freq) + " is above kernel.perf_event_max_sample_rate=" +
                        std::to_string(*maxrate) + ": lower -F or raise the sysctl (sysctl -w " +
                        "kernel.perf_event_max_sample_rate=" + std::to_string(opts_.sampling.freq) + ")");
    }
    per_task_ = !synthetic && per_task(opts_);
    // The user's events, then the tracking event that carries COMM/MMAP/FORK/EXIT records so perf
    // report can name processes and resolve symbols of what starts during the record.
    specs_ = synthetic ? std::vector<EventSpec>{synthetic_event()} : opts_.events;
    if (!synthetic) specs_.push_back(tracking_event());
    const std::vector<int> cpu_list = synthetic ? std::vector<int>{} : resolve_cpus();
    std::vector<int> tids = synthetic ? std::vector<int>{} : resolve_tasks();

    // Stop sources first: the command is forked now and held until the events are ready.
    signals_ = std::make_unique<SignalBlock>();
    if (!opts_.command.empty()) {
        child_ = std::make_unique<Child>(opts_.command, signals_->old_mask());
        if (per_task_) tids = {child_->pid()};
    }

    // 1. Events: open disabled, one ring per CPU, the other events redirected into it.
    auto make_attrs = [&](size_t pages, bool quiet) {
        SamplingConfig sampling = opts_.sampling;
        const uint64_t ring_bytes = uint64_t(pages) * page_size();
        if (!sampling.wakeup_events && !sampling.wakeup_watermark) {
            // Default: wake at a quarter of the ring, not the kernel's half. Measured at 10 kHz with
            // dwarf stacks on busy CPUs (README, "Wake-up policy"): loss fell from 7-79 to 0-11
            // samples per 3 s for twice the wake-ups (7.4 per MB instead of 3.8).
            sampling.wakeup_watermark = uint32_t(ring_bytes / 4);
        }
        if (sampling.wakeup_watermark && sampling.wakeup_watermark > ring_bytes / 2) {
            // A watermark at or above the ring size never fires: the ring fills, the kernel drops,
            // and nothing wakes us until the end. Half the ring is the largest useful value.
            if (!quiet)
                log_ << "ringcap: --wakeup-watermark " << sampling.wakeup_watermark << " is more than half the "
                     << ring_bytes << "-byte ring; using " << ring_bytes / 2 << "\n";
            sampling.wakeup_watermark = uint32_t(ring_bytes / 2);
        }
        std::vector<perf_event_attr> out;
        for (const auto& e : specs_) {
            perf_event_attr a = synthetic ? synthetic_attr(opts_.synthetic, sampling) : make_attr(e, sampling);
            if (per_task_) a.inherit = 1;  // follow the tasks' children, as perf does
            // A command's events switch on at its exec, so its start is not missed and ringcap's
            // own fork/exec work is not recorded.
            if (per_task_ && child_) a.enable_on_exec = 1;
            out.push_back(a);
        }
        return out;
    };
    const size_t ring_count = synthetic ? opts_.synthetic.rings : cpu_list.size();
    const size_t requested = opts_.mmap_pages ? opts_.mmap_pages : default_ring_pages(ring_count, has_cap_ipc_lock());
    size_t pages = requested;
    std::vector<perf_event_attr> attrs;
    if (synthetic) {
        // Rings in ordinary memory, each "owner fd" an eventfd its producer signals (synthetic.hpp).
        ensure_fd_limit(opts_.synthetic.rings);
        attrs = make_attrs(pages, false);
        synthetic_ = std::make_unique<SyntheticSource>(opts_.synthetic, attrs.front(), pages, 1);
        cpus_ = synthetic_->take_rings();
    } else {
        ensure_fd_limit(cpu_list.size() * std::max<size_t>(1, tids.size()) * specs_.size());
        for (;;) {
            attrs = make_attrs(pages, pages != requested);
            try {
                cpus_ = open_cpu_events(specs_, attrs, cpu_list, tids, pages);
                break;
            } catch (const RingMemoryError& e) {
                // perf fails here; we halve the rings (all of them, to keep them even) down to a floor.
                if (pages <= kMinRingPages) throw;
                cpus_.clear();
                pages /= 2;
            }
        }
    }
    if (pages != requested)
        log_ << "ringcap: ring memory for " << (opts_.mmap_pages ? "-m " : "the default -m ") << requested
             << " was refused (above the locked-memory limit, kernel.perf_event_mlock_kb + RLIMIT_MEMLOCK, or "
                "out of memory); using -m "
             << pages << " instead. Raise the limits or run with CAP_IPC_LOCK for bigger rings.\n";
    ring_pages_ = pages;
    attrs_.resize(specs_.size());
    for (size_t e = 0; e < attrs_.size(); ++e) {
        attrs_[e].attr = attrs[e];
        attrs_[e].name = specs_[e].name;
    }
    event_counters_.assign(specs_.size(), {});
    event_lost_samples_.assign(specs_.size(), 0);
    rings_.resize(cpus_.size());
    for (size_t i = 0; i < cpus_.size(); ++i) {
        for (const auto& ev : cpus_[i].events) {
            rings_[i].ids.add(ev.id, ev.event_index);
            attrs_[ev.event_index].ids.push_back(ev.id);
        }
        rings_[i].reader = RingReader(cpus_[i].ring.view(), &rings_[i].ids, event_counters_,
                                      opts_.build_ids ? this : nullptr);
    }
    live_rings_ = rings_.size();

    // 2. Loop, staging, output.
    const size_t nrings = rings_.size();
    // One buffer per ring and two more, at least 16 (16 MiB): staging is what rides out a slow write
    // before the rings start to fill (README, Performance: 4 buffers lost samples at 10 kHz dwarf).
    const size_t nbuf = opts_.staging_buffers ? opts_.staging_buffers : std::clamp<size_t>(nrings + 2, 16, 64);
    staging_ = std::make_unique<StagingPool>(opts_.staging_buffer_bytes, nbuf);
    LoopConfig lc;
    // The synthetic rings' eventfds stay readable (level-triggered epoll would spin on them); they
    // exist to measure the io_uring path anyway.
    lc.backend = synthetic ? Backend::Uring : opts_.backend;
    lc.rings = unsigned(nrings);
    lc.writes_in_flight = unsigned(nbuf);
    lc.cq_entries = opts_.cq_entries;
    loop_ = make_loop(lc, &fallback_reason_);
    if (!fallback_reason_.empty())
        log_ << "ringcap: io_uring unavailable, using epoll: " << fallback_reason_ << "\n";

    file_ = std::make_unique<OutputFile>(OutputFile::create(opts_.output, opts_.allow_direct));
    data_offset_ = data_offset_for(attrs_);
    {
        // A provisional header (data size 0) so the file is recognisable from the start.
        const uint64_t none[4] = {0, 0, 0, 0};
        auto head = build_file_head(attrs_, 0, none);
        file_->pwrite_all(head.data(), head.size(), 0);
    }
    // Setup succeeded: only now is an existing output touched (perf keeps one .old).
    file_->publish();
    writer_ = std::make_unique<Writer>(*loop_, *file_, *staging_, data_offset_);

    if (opts_.verbose) {
        log_ << "ringcap: backend " << loop_->describe() << "; polling " << nrings << " ring owner fd(s)\n"
             << "ringcap: " << nrings << " ring(s) of " << ring_pages_ << " data pages ("
             << human_bytes(ring_pages_ * page_size()) << ") for " << opts_.events.size() << " event(s)"
             << (per_task_ ? " x " + std::to_string(tids.size()) + " task(s)" : std::string(", system-wide")) << "\n"
             << "ringcap: staging " << nbuf << " x " << human_bytes(staging_->buffer_size())
             << " (4 KiB aligned), output '" << opts_.output << "' "
             << (file_->o_direct() ? "O_DIRECT" : "buffered (O_DIRECT refused or disabled)") << ", data at offset "
             << data_offset_ << "\n";
    }

    // 3. Watch every ring (they are mapped: seed 000) and the stop sources, then start.
    for (uint32_t i = 0; i < nrings; ++i) loop_->watch_ring(i, 0, cpus_[i].owner_fd(), cpus_[i].ring);
    loop_->watch_source(Source::Signal, signals_->fd());
    if (child_) loop_->watch_source(Source::Child, child_->pidfd());
    if (opts_.duration_s > 0) loop_->set_timer(opts_.duration_s);
    loop_->set_tick(kTickSeconds);
    loop_->run_once(*this, false);  // submit the polls before anything can fire

    // What already runs: COMM/MMAP2 from /proc and the kernel map, written first (time 0, so perf
    // processes them before any sample). The tracking event is enabled before the scan so nothing
    // that starts meanwhile is missed (a duplicate is harmless); a command is followed by its own
    // tracking events from exec on.
    if (!(per_task_ && child_)) enable_tracking();
    if (!synthetic) {  // synthetic samples name no real process or mapping
        const size_t id_size = sample_id_size(attrs_.front().attr.sample_type);
        RecordSink sink = [this](const void* rec, size_t n) {
            perf_event_header h;
            std::memcpy(&h, rec, sizeof h);
            if (opts_.build_ids && h.type == PERF_RECORD_MMAP2 && !(h.misc & PERF_RECORD_MISC_MMAP_DATA))
                on_exec_mapping(static_cast<const char*>(rec) + 72, false);
            append_blocking(rec, n);
        };
        synthesize_kernel(sink, id_size, synth_);
        if (!(per_task_ && child_)) {
            std::optional<std::vector<int>> pids;
            if (per_task_) {
                std::vector<int> p = opts_.pids;
                for (int tid : opts_.tids) p.push_back(tid);  // its thread group is found via /proc/TID
                pids = p;
            }
            synthesize_tasks(sink, id_size, pids, opts_.sampling.call_graph == CallGraph::Dwarf, synth_);
        }
        synth_records_ = synth_.threads + synth_.maps + (synth_.kernel_map ? 1 : 0);
        if (opts_.verbose)
            log_ << "ringcap: synthesized " << synth_.threads << " threads of " << synth_.processes << " processes, "
                 << synth_.maps << " executable maps" << (synth_.kernel_map ? ", the kernel map" : "") << " ("
                 << human_bytes(synth_.bytes) << ") in " << std::fixed << std::setprecision(3) << synth_.seconds
                 << " s\n";
        if (!synth_.kernel_map)
            log_ << "ringcap: /proc/kallsyms hides kernel addresses (kernel.kptr_restrict): kernel samples will not "
                    "resolve to symbols\n";
    }

    if (opts_.realtime_priority) {
        // As perf record -r: a collector that is woken first drains before the rings fill. It
        // sleeps most of the time, and RT throttling (kernel.sched_rt_runtime_us) bounds it anyway.
        sched_param sp{};
        sp.sched_priority = opts_.realtime_priority;
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
            throw Error("-r " + std::to_string(opts_.realtime_priority) + ": sched_setscheduler(SCHED_FIFO): " +
                        errno_text(errno) + " (needs root or CAP_SYS_NICE)");
    }

    const auto t0 = Clock::now();
    if (synthetic_) synthetic_->start();
    else if (!(per_task_ && child_)) enable_all(cpus_);
    if (child_) child_->start();

    // 4. Steady state: each iteration is one io_uring_enter that submits the queued writes and
    // waits; then one pass drains every ring.
    while (!stop_) {
        writer_->queue_ready();
        loop_->run_once(*this, true);
        // On a tick the round marker, if due, is the padding of the idle flush instead.
        const bool complete = sweep(/*allow_round=*/!tick_);
        if (tick_ && complete) flush_idle_staging();
        tick_ = false;
        writer_->mark_boundary(staging_->bytes_committed());
        refresh_header();
        if (writer_->failed()) {
            stop_reason_ = "write error";
            break;
        }
        if (live_rings_ == 0) {
            stop_reason_ = per_task_ ? "every task exited" : "every event hung up";
            break;
        }
    }
    stopping_ = true;

    // 5. Stop: disable, sweep until every ring is empty, flush, then write features and header.
    if (synthetic_) synthetic_->stop();  // joins the producers: all they wrote is in the rings
    else disable_all(cpus_);
    while (!sweep() && !writer_->failed()) {
        writer_->queue_ready();
        loop_->run_once(*this, true);
    }
    for (const auto& l : synthetic_ ? synthetic_->lost_counts() : read_lost_counts(cpus_)) {
        // Samples the kernel dropped for this event; perf record writes them the same way.
        auto rec = make_lost_samples(l.id, l.cpu, l.lost);
        append_blocking(&rec, sizeof rec);
        sum.lost_samples += l.lost;
        event_lost_samples_[l.event_index] += l.lost;
    }
    sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    finish_file(sum);
    if (child_) child_->terminate();
    fill_summary(sum);
    print_summary(sum);
    return sum.exit_code;
}

void Session::flush_idle_staging() {
    // At a low sample rate a staging buffer can take minutes to fill, and a crash would lose it.
    // Once per tick, after a complete pass, send the partial buffer: padded to 4 KiB with one
    // FINISHED_ROUND record (header.size covers the padding; perf skips it by size), so the data
    // stays O_DIRECT-aligned and the marker is a genuine end of round.
    const size_t fill = staging_->current_fill();
    if (fill == 0 || writer_->in_flight() > 0) return;
    size_t pad = (kStagingAlign - fill % kStagingAlign) % kStagingAlign;
    if (pad > 0) {
        if (!round_due()) return;  // the padding is a round marker: try again next tick
        alignas(8) std::byte rec[kStagingAlign] = {};
        perf_event_header h = finished_round_record();
        h.size = uint16_t(pad);
        std::memcpy(rec, &h, sizeof h);
        if (!staging_->append(rec, pad)) return;
        mark_round();
    }
    writer_->queue_partial();
}

void Session::enable_tracking() {
    for (auto& c : cpus_)
        for (auto& e : c.events)
            if (specs_[e.event_index].tracking && ::ioctl(e.fd.get(), PERF_EVENT_IOC_ENABLE, 0) != 0)
                throw Error("PERF_EVENT_IOC_ENABLE of the tracking event: " + errno_text(errno));
}

void Session::refresh_header() {
    // Crash safety: keep the on-disk header's data size at the last record boundary that is wholly
    // on disk, so perf reads a file cut short by SIGKILL up to there. A few times a second at most.
    const uint64_t durable = writer_->durable_size();
    if (durable == published_size_) return;
    const auto now = Clock::now();
    if (now - published_at_ < std::chrono::milliseconds(250)) return;
    const uint64_t none[4] = {0, 0, 0, 0};
    const PerfFileHeader h = make_file_header(attrs_, durable, none);
    if (writer_->publish_header(&h, sizeof h)) {
        published_size_ = durable;
        published_at_ = now;
    }
}

void Session::finish_file(RecordSummary& sum) {
    writer_->queue_ready();
    writer_->queue_partial();
    writer_->mark_boundary(staging_->bytes_committed());
    writer_->wait_idle();
    // Everything if all writes succeeded; after a failure, the last record boundary before it.
    const uint64_t data_size = writer_->durable_size();
    sum.file_bytes = data_size;
    const uint64_t feat_start = data_offset_ + data_size;
    std::vector<std::pair<std::string, std::string>> tracepoints;
    for (const auto& sp : specs_)
        if (sp.type == PERF_TYPE_TRACEPOINT) tracepoints.emplace_back(sp.tp_system, sp.tp_event);
    std::vector<std::byte> tracing;
    if (!tracepoints.empty()) tracing = build_tracing_data(tracefs_root(), tracepoints);
    std::vector<std::byte> build_ids;
    if (opts_.build_ids) {
        // perf writes the build-ids of the DSOs that got samples; we write those of every DSO that
        // was mapped executable, which is a superset and needs no second pass over the data.
        std::vector<BuildIdEntry> entries;
        if (auto k = kernel_build_id()) entries.push_back({"[kernel.kallsyms]", *k, true});
        for (const auto& dso : dsos_)
            if (auto id = read_build_id(dso)) entries.push_back({dso, *id, false});
        build_ids = build_build_id_feature(entries);
    }
    FeatureBlock feats = build_features(attrs_, HostInfo::current(opts_.argv), feat_start, tracing, build_ids);
    const uint64_t none[4] = {0, 0, 0, 0};
    std::string feature_error;
    // Cut what a failed write may have left beyond the kept data first: on a full disk that frees
    // the room the feature block needs.
    if (ftruncate(file_->buffered_fd(), off_t(feat_start)) != 0)
        throw Error("truncating '" + opts_.output + "': " + errno_text(errno), 1);
    try {
        file_->pwrite_all(feats.bytes.data(), feats.bytes.size(), feat_start);
    } catch (const Error& e) {
        // On a full disk even the small feature block may not fit: keep a valid file without it.
        feature_error = e.what();
        feats.bytes.clear();
        std::memcpy(feats.bitmap, none, sizeof none);
    }
    auto head = build_file_head(attrs_, data_size, feats.bitmap);
    file_->pwrite_all(head.data(), head.size(), 0);
    if (writer_->failed())
        log_ << "ringcap: ERROR: writing '" << opts_.output << "' failed: " << errno_text(writer_->error())
             << "; capture stopped and kept " << data_size << " bytes of data (" << writer_->bytes_queued() - data_size
             << " bytes not written); the file is valid up to there\n";
    if (!feature_error.empty())
        log_ << "ringcap: the header features were not written (" << feature_error << ")\n";
}

void Session::fill_summary(RecordSummary& sum) const {
    sum.path = opts_.output;
    sum.backend = loop_->name();
    sum.stop_reason = stop_reason_;
    sum.o_direct = file_->o_direct();
    sum.rounds = rounds_;
    sum.hangups = hangups_;
    const LoopStats& ls = loop_->stats();
    sum.loop_iterations = ls.iterations;
    if (live_rings_ == 0) sum.iterations_after_hangup = ls.iterations - iterations_at_all_hung_up_;
    sum.io_uring_enters = ls.enters;
    sum.rearms = ls.rearms;
    sum.cqes = ls.ring_events;
    sum.writes = writer_->stats().writes;
    for (size_t i = 0; i < rings_.size(); ++i) {
        CpuSummary c;
        c.cpu = cpus_[i].cpu;
        c.ring = rings_[i].reader.counters();
        c.cqes = rings_[i].events;
        c.hung_up = rings_[i].retired;
        auto& t = sum.total;
        t.bytes += c.ring.bytes;
        t.records += c.ring.records;
        t.samples += c.ring.samples;
        t.lost_records += c.ring.lost_records;
        t.lost += c.ring.lost;
        t.throttles += c.ring.throttles;
        t.bad_headers += c.ring.bad_headers;
        t.partial_drains += c.ring.partial_drains;
        sum.cpus.push_back(c);
    }
    sum.synthesized_records = synth_records_;
    sum.synthesis_seconds = synth_.seconds;
    if (synthetic_) sum.synthetic_offered = synthetic_->offered();
    for (const auto& c : cpus_) sum.ring_bytes += c.ring.mapped_bytes();
    sum.staging_bytes = staging_->buffer_size() * staging_->count();
    for (size_t e = 0; e < specs_.size(); ++e) {
        if (specs_[e].tracking) continue;
        EventSummary es;
        es.name = specs_[e].name;
        es.samples = event_counters_[e].samples;
        es.lost = event_counters_[e].lost;
        es.lost_samples = event_lost_samples_[e];
        sum.events.push_back(es);
        sum.kernel_lost += es.kernel_lost();
    }
    sum.exit_code = writer_->failed() ? 1 : 0;
}

void Session::print_summary(const RecordSummary& s) const {
    std::ostringstream o;  // one write to stderr
    o << "ringcap: stopped (" << s.stop_reason << ") after " << std::fixed << std::setprecision(2) << s.seconds
      << " s\n";
    o << "  cpu         bytes    records    samples  lost-recs       lost   wakeups\n";
    for (const auto& c : s.cpus)
        o << "  " << std::setw(3) << c.cpu << std::setw(14) << c.ring.bytes << std::setw(11) << c.ring.records
          << std::setw(11) << c.ring.samples << std::setw(11) << c.ring.lost_records << std::setw(11) << c.ring.lost
          << std::setw(10) << c.cqes << (c.hung_up ? "  hung up" : "") << "\n";
    o << "  all" << std::setw(14) << s.total.bytes << std::setw(11) << s.total.records << std::setw(11)
      << s.total.samples << std::setw(11) << s.total.lost_records << std::setw(11) << s.total.lost << std::setw(10)
      << s.cqes << "\n";
    for (const auto& e : s.events)
        o << "  event " << e.name << ": samples " << e.samples << ", kernel-lost " << e.kernel_lost() << "\n";
    const double mb = double(s.file_bytes) / 1e6;
    o << "ringcap: wrote " << std::setprecision(3) << mb << " MB to '" << s.path << "' ("
      << (s.o_direct ? "O_DIRECT" : "buffered") << ", " << s.writes << " writes, " << std::setprecision(1)
      << (s.seconds > 0 ? mb / s.seconds : 0.0) << " MB/s), " << s.rounds << " rounds; " << s.backend << ": "
      << s.cqes << " ring wake-ups, " << s.rearms << " re-arms, " << s.io_uring_enters << " waits\n";
    o << "ringcap: samples=" << s.total.samples << " records=" << s.total.records << " lost=" << s.kernel_lost
      << " lost_records=" << s.total.lost_records << " cqes=" << s.cqes << " rearms=" << s.rearms << " hangups=" << s.hangups
      << " bytes=" << s.file_bytes << " staging_full=" << s.total.partial_drains << "\n";
    if (s.synthetic_offered)
        o << "ringcap: synthetic source offered " << s.synthetic_offered << " samples (" << s.kernel_lost
          << " dropped at full rings)\n";
    const uint64_t lost = s.kernel_lost;
    if (lost > 0)
        o << "ringcap: WARNING: the kernel dropped " << lost << " sample(s) ("
          << std::setprecision(2) << 100.0 * double(lost) / double(lost + s.total.samples)
          << " %): the rings filled faster than they were drained. Use a bigger ring (-m), a lower rate (-F), "
             "or fewer events.\n";
    if (lost > 0 && s.total.partial_drains > 0)
        o << "ringcap: " << s.total.partial_drains << " ring drain(s) stopped early on full staging: the output "
             "could not keep up; more staging (--staging-buffers) rides out slow writes.\n";
    if (s.total.bad_headers > 0)
        o << "ringcap: WARNING: " << s.total.bad_headers << " malformed record header(s) seen in the rings\n";
    log_ << o.str() << std::flush;
}

}  // namespace

int run_record(const RecordOptions& opts, std::ostream& log, RecordSummary* summary) {
    RecordSummary local;
    RecordSummary& sum = summary ? *summary : local;
    Session session(opts, log);
    return session.run(sum);
}

}  // namespace ringcap
