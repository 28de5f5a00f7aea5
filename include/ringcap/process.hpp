// What a record does to its own process and to the command it runs: the stop signals, the recorded
// command (forked early, started once the events are ready), resource limits, scheduling priority.
#pragma once

#include <csignal>
#include <cstddef>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "ringcap/sys.hpp"

namespace ringcap {

// The record's signal policy, for as long as it lives (restored on exit):
//  - SIGINT, SIGTERM and SIGHUP are blocked, so they arrive through a signalfd on the loop, and a
//    second Ctrl-C during the final flush cannot interrupt it;
//  - SIGPIPE is ignored: a closed stderr (`ringcap record ... 2>&1 | head -1`) must not end a capture;
//  - SIGXFSZ is ignored: a write beyond RLIMIT_FSIZE fails with EFBIG, handled like a full disk.
class SignalBlock {
public:
    SignalBlock();
    ~SignalBlock();
    SignalBlock(const SignalBlock&) = delete;
    SignalBlock& operator=(const SignalBlock&) = delete;

    int fd() const { return fd_.get(); }
    // Also delivers `sig` through fd() (SIGUSR2 for --switch-output) instead of its default action.
    void watch(int sig);
    // The name of a pending stop signal ("SIGINT"), consumed.
    std::string take();
    // In a forked child before exec: the signal mask and dispositions ringcap was started with.
    // Async-signal-safe.
    void restore_in_child() const;

private:
    sigset_t set_{}, old_{};
    struct sigaction old_pipe_{}, old_xfsz_{};
    UniqueFd fd_;
};

// What became of the recorded command.
struct CommandOutcome {
    std::string what;   // "exited with status 3", "was killed by SIGKILL (status 137)", ...
    int exit_code = 0;  // its exit status, 128 + signal if killed; 0 if the record stopped it
};

// The recorded command: forked at once, held on a pipe until start() (as perf does, so its exec is
// the first thing the events see), watched through a pidfd. If it is never started, it exits
// without running; if it still runs at the end, it gets SIGTERM.
class Command {
public:
    // Throws Error if the command cannot be found or forked. It runs with the signal mask and
    // dispositions ringcap was started with.
    Command(const std::vector<std::string>& argv, const SignalBlock& signals);
    ~Command();
    Command(const Command&) = delete;
    Command& operator=(const Command&) = delete;

    pid_t pid() const { return pid_; }
    int pidfd() const { return pidfd_.get(); }
    void start();
    // Whether it has not exited yet (reaps it if it has).
    bool running();
    // Sends SIGTERM if it is still running and reaps it. Returns its wait status.
    int terminate();
    // terminate(), and what became of it: still running at the end (the record stopped first, which
    // is not a failure), or its own end.
    CommandOutcome finish();

private:
    pid_t pid_ = -1;
    UniqueFd go_, pidfd_;
    bool reaped_ = false;
    int status_ = 0;
    std::optional<CommandOutcome> outcome_;  // finish()'s, once called
};

// The path execv would run for `cmd` (PATH lookup when it has no '/'), or "" if there is none.
std::string find_executable(const std::string& cmd);

// Raises RLIMIT_NOFILE's soft limit to the hard one if `fds` more descriptors would not fit.
// Throws Error naming the limit if even the hard limit is too low.
void ensure_fd_limit(size_t fds);

// SCHED_FIFO at `priority` for the calling thread: 0 or errno (EPERM: needs root or CAP_SYS_NICE).
int set_realtime_priority(int priority);
// Whether the calling thread runs SCHED_FIFO or SCHED_RR (ringcap started under chrt).
bool realtime_thread();

// The calling thread's nice value (per thread on Linux; threads it starts inherit it). 0, or the
// errno of the refusal: a value below the current one needs CAP_SYS_NICE or RLIMIT_NICE.
int set_thread_nice(int nice);
// The calling thread's nice value.
int thread_nice();

}  // namespace ringcap
