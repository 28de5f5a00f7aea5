// Counts the data writes io_uring hands to a worker thread instead of running them inline: the
// io_uring:io_uring_queue_async_work tracepoint, filtered to WRITE and WRITE_FIXED (tests and bench).
#pragma once

#include <string>

#include "ringcap/sys.hpp"

namespace ringcap {

// A counting perf event on the tracepoint, disabled if `disabled`: on `cpu` for every task, or (cpu
// -1) for this thread and the threads it starts. An invalid fd, with `why`, when tracefs is missing or
// the kernel refuses the event; throws Error if it refuses the filter.
UniqueFd open_punt_counter(int cpu, bool disabled, std::string* why);

}  // namespace ringcap
