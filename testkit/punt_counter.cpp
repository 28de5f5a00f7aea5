#include "testkit/punt_counter.hpp"

#include <cerrno>
#include <cstring>
#include <linux/perf_event.h>
#include <liburing.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ringcap {

UniqueFd open_punt_counter(int cpu, bool disabled, std::string* why) {
    auto id = read_text_file("/sys/kernel/tracing/events/io_uring/io_uring_queue_async_work/id");
    if (!id) id = read_text_file("/sys/kernel/debug/tracing/events/io_uring/io_uring_queue_async_work/id");
    if (!id) {
        *why = "tracefs is not mounted at /sys/kernel/tracing (mount -t tracefs nodev /sys/kernel/tracing)";
        return UniqueFd();
    }
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_TRACEPOINT;
    attr.config = std::stoull(*id);
    attr.disabled = disabled;
    attr.inherit = cpu < 0;
    UniqueFd fd(int(syscall(SYS_perf_event_open, &attr, cpu < 0 ? 0 : -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)));
    if (!fd) {
        *why = std::string("perf_event_open on the tracepoint: ") + std::strerror(errno);
        return fd;
    }
    const std::string filter =
        "opcode == " + std::to_string(IORING_OP_WRITE_FIXED) + " || opcode == " + std::to_string(IORING_OP_WRITE);
    if (ioctl(fd.get(), PERF_EVENT_IOC_SET_FILTER, filter.c_str()) != 0)
        throw Error("PERF_EVENT_IOC_SET_FILTER '" + filter + "': " + errno_text(errno));
    return fd;
}

}  // namespace ringcap
