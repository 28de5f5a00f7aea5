// Skips: a test that cannot run here says why and is reported as skipped, never as passed.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <liburing.h>
#include <linux/perf_event.h>
#include <string>
#include <sys/syscall.h>
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

inline void require_kernel() {
    if (std::string why = kernel_refusal(); !why.empty()) skip_test(why);
}
inline void require_uring() {
    if (std::string why = uring_refusal(); !why.empty()) skip_test(why);
}
