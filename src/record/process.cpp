#include "ringcap/process.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ringcap {

SignalBlock::SignalBlock() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_pipe_);
    sigaction(SIGXFSZ, &ignore, &old_xfsz_);
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGHUP);
    sigprocmask(SIG_BLOCK, &set_, &old_);
    fd_.reset(signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!fd_) {
        const int err = errno;
        restore_in_child();
        throw Error("signalfd: " + errno_text(err));
    }
}

SignalBlock::~SignalBlock() { restore_in_child(); }

void SignalBlock::watch(int sig) {
    sigaddset(&set_, sig);
    sigprocmask(SIG_BLOCK, &set_, nullptr);
    if (signalfd(fd_.get(), &set_, SFD_CLOEXEC | SFD_NONBLOCK) < 0) throw Error("signalfd: " + errno_text(errno));
}

void SignalBlock::restore_in_child() const {
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    sigaction(SIGXFSZ, &old_xfsz_, nullptr);
    sigprocmask(SIG_SETMASK, &old_, nullptr);
}

std::string SignalBlock::take() {
    signalfd_siginfo si{};
    if (::read(fd_.get(), &si, sizeof si) != ssize_t(sizeof si)) return "signal";
    const char* n = sigabbrev_np(int(si.ssi_signo));
    return std::string("SIG") + (n ? n : "?");
}

std::string find_executable(const std::string& cmd) {
    if (cmd.find('/') != std::string::npos) return access(cmd.c_str(), X_OK) == 0 ? cmd : "";
    const char* path = getenv("PATH");
    const std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
    size_t pos = 0;
    while (pos <= p.size()) {
        const size_t colon = p.find(':', pos);
        const std::string dir = p.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
        const std::string full = (dir.empty() ? "." : dir) + "/" + cmd;
        struct stat st{};
        if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(full.c_str(), X_OK) == 0) return full;
        if (colon == std::string::npos) break;
        pos = colon + 1;
    }
    return "";
}

Command::Command(const std::vector<std::string>& cmd, const SignalBlock& signals) {
    const std::string exe = find_executable(cmd[0]);
    if (exe.empty()) throw Error("cannot run '" + cmd[0] + "': not found or not executable (check PATH)");
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) throw Error("pipe: " + errno_text(errno));
    UniqueFd go_read(go[0]), go_write(go[1]);
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) throw Error("fork: " + errno_text(errno));
    if (pid_ == 0) {
        signals.restore_in_child();
        go_write.reset();
        char c;
        // EOF without a byte means the recorder gave up: do not run the command.
        if (::read(go_read.get(), &c, 1) != 1) _exit(127);
        execv(exe.c_str(), argv.data());
        dprintf(2, "ringcap: cannot run '%s': %s\n", exe.c_str(), strerror(errno));
        _exit(127);
    }
    go_ = std::move(go_write);
    pidfd_.reset(int(syscall(SYS_pidfd_open, pid_, 0)));
    if (!pidfd_) {
        const int err = errno;
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        throw Error("pidfd_open: " + errno_text(err) + " (needs Linux 5.3)");
    }
}

Command::~Command() {
    if (pid_ > 0 && !reaped_) {
        go_.reset();  // a command never started exits on EOF
        terminate();
    }
}

void Command::start() {
    const char c = 1;
    if (::write(go_.get(), &c, 1) != 1) throw Error("cannot start the command: " + errno_text(errno));
    go_.reset();
}

bool Command::running() {
    if (reaped_) return false;
    if (waitpid(pid_, &status_, WNOHANG) != pid_) return true;
    reaped_ = true;
    return false;
}

int Command::terminate() {
    if (running()) {
        kill(pid_, SIGTERM);
        while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {}
        reaped_ = true;
    }
    return status_;
}

CommandOutcome Command::finish() {
    if (outcome_) return *outcome_;  // the first call's: a second must not see our own SIGTERM
    CommandOutcome& o = outcome_.emplace();
    if (running()) {
        terminate();
        o.what = "was still running at the end and got SIGTERM";
        return o;
    }
    if (WIFEXITED(status_)) {
        o.exit_code = WEXITSTATUS(status_);
        o.what = "exited with status " + std::to_string(o.exit_code);
    } else if (WIFSIGNALED(status_)) {
        o.exit_code = 128 + WTERMSIG(status_);
        const char* n = sigabbrev_np(WTERMSIG(status_));
        o.what = std::string("was killed by SIG") + (n ? n : "?") + " (status " + std::to_string(o.exit_code) + ")";
    }
    return o;
}

void ensure_fd_limit(size_t fds) {
    const size_t need = fds + 64;  // signalfd, pidfd, output, io_uring, stdio...
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

int set_realtime_priority(int priority) {
    // As perf record -r: a collector that is woken first drains before the rings fill. It sleeps
    // most of the time, and RT throttling (kernel.sched_rt_runtime_us) bounds it anyway.
    sched_param sp{};
    sp.sched_priority = priority;
    return sched_setscheduler(0, SCHED_FIFO, &sp) == 0 ? 0 : errno;
}

bool realtime_thread() {
    const int policy = sched_getscheduler(0);
    return policy == SCHED_FIFO || policy == SCHED_RR;
}

int set_thread_nice(int nice) {
    // PRIO_PROCESS with the thread's id: Linux applies it to that thread only, not to the process.
    return ::setpriority(PRIO_PROCESS, ::gettid(), nice) == 0 ? 0 : errno;
}

int thread_nice() {
    errno = 0;
    const int n = ::getpriority(PRIO_PROCESS, ::gettid());  // -1 is a nice value too: errno tells
    return errno == 0 ? n : 0;
}

}  // namespace ringcap
