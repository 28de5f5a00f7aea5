// Skips: a test that cannot run here says why and is reported as skipped, never as passed.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <liburing.h>
#include <linux/perf_event.h>
#include <grp.h>
#include <pwd.h>
#include <string>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// Catch2 v2 has no SKIP: the test prints why and exits with 77, which ctest reports as "Skipped"
// (SKIP_RETURN_CODE). Each ctest entry runs one test case, so nothing else is cut short.
[[noreturn]] inline void skip_test(const std::string& reason) {
    std::fprintf(stderr, "SKIPPED: %s\n", reason.c_str());
    std::fflush(stderr);
    std::_Exit(77);
}

// Why io_uring cannot be used here, or "".
inline std::string uring_refusal() {
    io_uring ring;
    int rc = io_uring_queue_init(4, &ring, 0);
    if (rc < 0) return std::string("io_uring_setup refused: ") + std::strerror(-rc);
    io_uring_queue_exit(&ring);
    return "";
}

// Why this machine cannot run a system-wide capture, or "" if it can: probes perf_event_open of a
// system-wide cpu-clock on CPU 0 and io_uring_setup, the two syscalls the recorder needs.
inline std::string kernel_refusal() {
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.disabled = 1;
    int fd = static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, 0, -1, 0));
    if (fd < 0) return std::string("perf_event_open(cpu-clock, cpu 0) refused: ") + std::strerror(errno);
    ::close(fd);
    return uring_refusal();
}

// In a child before exec, or in a child of run_as_nobody(): the unprivileged user nobody (exit 126
// if that fails).
inline void become_nobody() {
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(126);
}

// The attacks need the user nobody (uid 65534): without it, become_nobody() would fail in the child
// (exit 126) and read as the attack's failure.
inline void require_nobody() {
    if (!getpwuid(65534)) skip_test("no user with uid 65534 (nobody) here: the attacks run as nobody");
}

// A child process that runs `fn` as nobody; fn's return value is its exit status.
template <typename Fn>
pid_t run_as_nobody(Fn fn) {
    require_nobody();
    const pid_t pid = fork();
    if (pid == 0) {
        become_nobody();
        _exit(fn());
    }
    return pid;
}

// The exit status of a child (128 + signal when killed), or -1.
inline int wait_child(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The attacks of tests/record/security_test.cpp are run as nobody against ringcap as root. With
// RINGCAP_ROOT_REQUIRED=1 (CI, which runs as root) not being root is a failure, not a skip: a CI that
// lost root must not pass with its security tests skipped.
inline void require_root() {
    if (geteuid() == 0) return;
    const char* required = std::getenv("RINGCAP_ROOT_REQUIRED");
    if (required && std::strcmp(required, "1") == 0) {
        std::fprintf(stderr, "FAILED: needs root (euid is %u) and RINGCAP_ROOT_REQUIRED=1 is set: run the tests as root\n",
                     unsigned(geteuid()));
        std::fflush(stderr);
        std::_Exit(1);
    }
    skip_test("needs root: the attack runs as nobody against a root ringcap (RINGCAP_ROOT_REQUIRED=1 makes this a failure)");
}

inline void require_kernel() {
    if (std::string why = kernel_refusal(); !why.empty()) skip_test(why);
}
inline void require_uring() {
    if (std::string why = uring_refusal(); !why.empty()) skip_test(why);
}
