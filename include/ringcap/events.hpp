// Events: from perf's event names to perf_event_attr. Opening them is the perf ring source's job
// (perf_source.hpp).
#pragma once

#include <cstdint>
#include <linux/perf_event.h>
#include <string>
#include <vector>

#include "ringcap/sys.hpp"

namespace ringcap {

// perf's event modifiers (":u", ":k", ":ppp", ...) as perf_event_attr bits.
struct EventModifiers {
    bool exclude_user = false, exclude_kernel = false, exclude_hv = false;
    bool exclude_guest = false, exclude_host = false;
    uint8_t precise_ip = 0;
};

struct EventSpec {
    std::string name;  // as perf names it, e.g. "cpu-clock", "cpu-clock:u", "sched:sched_switch"
    uint32_t type = PERF_TYPE_SOFTWARE;
    uint64_t config = 0;
    std::string tp_system, tp_event;  // tracepoints only
    bool tracking = false;            // the dummy event that carries MMAP/COMM/TASK records
    EventModifiers mods{};
};

// The tracefs mount (/sys/kernel/tracing or /sys/kernel/debug/tracing), or "" if none is mounted.
std::string tracefs_root();

// Resolves one of perf's event names (software and generic hardware events), with perf's modifiers
// ("cpu-clock:u"). Throws Error naming the event if it is unknown.
EventSpec parse_event(const std::string& name);
// "a,b,c" -> specs. Tracepoints may use globs ("syscalls:sys_enter_*") and modifiers
// ("sched:sched_switch:u"); globs keep tracefs's order, as perf.
std::vector<EventSpec> parse_event_list(const std::string& list);
// perf's modifier letters u, k, h, G, H, p (up to 3), P applied as perf does (parse-events.c); throws
// Error for letters perf has that ringcap does not implement. `event` names the event in messages.
EventModifiers parse_modifiers(const std::string& letters, const std::string& event);
// What perf record samples without -e on a machine without a hardware PMU: its "cycles:P" falls back
// to cpu-clock, keeping the precise level, named "cpu-clock:ppp".
EventSpec default_event();
// The event that tracks processes and mappings: dummy, with mmap/mmap2/comm/comm_exec/task.
EventSpec tracking_event();

enum class CallGraph { None, FramePointer, Dwarf };

// Sampling settings shared by all events of a record.
struct SamplingConfig {
    bool use_freq = true;
    uint64_t freq = 4000;    // -F
    uint64_t period = 0;     // -c
    uint32_t wakeup_events = 0;     // --wakeup-events
    uint32_t wakeup_watermark = 0;  // --wakeup-watermark, bytes; with both 0 the record plan picks
                                    // a quarter of the ring (RecordPlan::sampling)
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
static_assert((kDefaultSampleType & (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME)) ==
                  (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME),
              "the ring reader finds a sample's id and time at fixed offsets (records.hpp field::)");
inline constexpr uint64_t kDefaultReadFormat = PERF_FORMAT_ID | PERF_FORMAT_LOST;

perf_event_attr make_attr(const EventSpec& spec, const SamplingConfig& cfg);

}  // namespace ringcap
