// Shared test helpers.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

// Catch2 v2 has no SKIP: a test that cannot run here (the kernel refused perf_event_open or io_uring)
// prints why and exits with 77, which ctest reports as "Skipped" (SKIP_RETURN_CODE). Each ctest entry
// runs one test case, so nothing else is cut short.
[[noreturn]] inline void skip_test(const std::string& reason) {
    std::fprintf(stderr, "SKIPPED: %s\n", reason.c_str());
    std::fflush(stderr);
    std::_Exit(77);
}

#include <cerrno>
#include <cstring>
#include <liburing.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

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
    io_uring ring;
    int rc = io_uring_queue_init(4, &ring, 0);
    if (rc < 0) return std::string("io_uring_setup refused: ") + std::strerror(-rc);
    io_uring_queue_exit(&ring);
    return "";
}
