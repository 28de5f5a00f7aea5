// Events: from perf's event names to perf_event_attr, and the per-CPU sets of open events.
#pragma once

#include <cstdint>
#include <linux/perf_event.h>
#include <optional>
#include <string>
#include <vector>

#include "ringcap/ring.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

struct EventSpec {
    std::string name;  // as perf names it, e.g. "cpu-clock", "sched:sched_switch"
    uint32_t type = PERF_TYPE_SOFTWARE;
    uint64_t config = 0;
    std::string tp_system, tp_event;  // tracepoints only
    bool tracking = false;            // the dummy event that carries MMAP/COMM/TASK records
};

// The tracefs mount (/sys/kernel/tracing or /sys/kernel/debug/tracing), or "" if none is mounted.
std::string tracefs_root();

// Resolves one of perf's event names (software and generic hardware events).
// Throws Error naming the event if it is unknown.
EventSpec parse_event(const std::string& name);
// "a,b,c" -> specs. Tracepoints may use globs ("syscalls:sys_enter_*").
std::vector<EventSpec> parse_event_list(const std::string& list);
// The event that tracks processes and mappings: dummy, with mmap/mmap2/comm/comm_exec/task.
EventSpec tracking_event();

enum class CallGraph { None, FramePointer, Dwarf };

// Sampling settings shared by all events of a record.
struct SamplingConfig {
    bool use_freq = true;
    uint64_t freq = 4000;    // -F
    uint64_t period = 0;     // -c
    uint32_t wakeup_events = 0;
    uint32_t wakeup_watermark = 0;  // bytes; 0 = kernel default (half the ring)
    CallGraph call_graph = CallGraph::None;  // -g / --call-graph fp|dwarf[,SIZE]
    uint32_t stack_size = 8192;              // dwarf: user stack bytes copied per sample
    uint16_t max_stack = 0;                  // --max-stack (0 = kernel.perf_event_max_stack)
};

// User registers perf samples for dwarf unwinding on x86_64 (perf's PERF_REGS_MASK: all general
// purpose registers and ip/sp/flags, without the segment registers).
inline constexpr uint64_t kDwarfRegsMask = 0xff0fff;

// Default sample format: samples find their event by IDENTIFIER, and every other record carries sample_id.
inline constexpr uint64_t kDefaultSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                                               PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD;
inline constexpr uint64_t kDefaultReadFormat = PERF_FORMAT_ID | PERF_FORMAT_LOST;

perf_event_attr make_attr(const EventSpec& spec, const SamplingConfig& cfg);

// One open perf event on one CPU (for one task, or for the whole CPU when tid is -1).
struct OpenEvent {
    UniqueFd fd;
    uint64_t id = 0;  // PERF_EVENT_IOC_ID
    size_t event_index = 0;
    int cpu = -1;
    int tid = -1;
};

// All events of one CPU. The first event owns the ring; the others are redirected into it
// with PERF_EVENT_IOC_SET_OUTPUT, so polling the owner fd sees every event's wake-ups (seed 001).
struct CpuEvents {
    int cpu = -1;
    std::vector<OpenEvent> events;  // events[0] owns the ring
    RingBuffer ring;

    int owner_fd() const { return events.front().fd.get(); }
};

// Opens every event on every CPU (disabled), for each task in `tids` or system-wide if `tids` is
// empty, maps one ring per CPU on its first event and redirects the others into it.
// Throws Error with what to change (sysctl, rlimit, flag) when the kernel refuses.
std::vector<CpuEvents> open_cpu_events(const std::vector<EventSpec>& specs, const std::vector<perf_event_attr>& attrs,
                                       const std::vector<int>& cpus, const std::vector<int>& tids,
                                       size_t ring_data_pages);

// The threads of a process (/proc/PID/task), or nullopt if it does not exist.
std::optional<std::vector<int>> threads_of(int pid);

// The default ring size (-m) for `rings` rings. Without CAP_IPC_LOCK, perf's 128 data pages: with
// the control page that is the 516 KiB of kernel.perf_event_mlock_kb's default. With it, the limit
// does not apply and bigger rings ride out scheduling and write stalls (README, Performance):
// 8 MiB per ring, smaller when there are many rings so that all of them take at most 256 MiB.
size_t default_ring_pages(size_t rings, bool can_lock_memory);
// Whether this process has CAP_IPC_LOCK in its effective set.
bool has_cap_ipc_lock();

void enable_all(std::vector<CpuEvents>& cpus);
void disable_all(std::vector<CpuEvents>& cpus);

// Per-event count of samples the kernel dropped (PERF_FORMAT_LOST), read once at the end.
struct LostReading {
    uint64_t id;
    int cpu;
    size_t event_index;
    uint64_t lost;
};
std::vector<LostReading> read_lost_counts(const std::vector<CpuEvents>& cpus);

}  // namespace ringcap
