#include <cstring>
#include <sys/syscall.h>
#include <unistd.h>

#include "ringcap/events.hpp"

namespace ringcap {

namespace {
struct Named {
    const char* name;
    uint32_t type;
    uint64_t config;
};
// perf's names and aliases (tools/perf/util/parse-events.c).
constexpr Named kEvents[] = {
    {"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK},
    {"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
    {"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
    {"faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
    {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
    {"cs", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
    {"cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
    {"migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
    {"minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN},
    {"major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ},
    {"alignment-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_ALIGNMENT_FAULTS},
    {"emulation-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_EMULATION_FAULTS},
    {"dummy", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY},
    {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
    {"cpu-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
    {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
    {"cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES},
    {"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
    {"branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    {"branch-instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
    {"bus-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BUS_CYCLES},
    {"stalled-cycles-frontend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
    {"stalled-cycles-backend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
    {"ref-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES},
};
}  // namespace

EventSpec parse_event(const std::string& name) {
    for (const auto& e : kEvents)
        if (name == e.name) return {name, e.type, e.config};
    throw Error("unknown event '" + name +
                "': use one of cpu-clock, task-clock, page-faults, context-switches, cpu-migrations, "
                "minor-faults, major-faults, dummy, or a hardware event (cycles, instructions, ...)");
}

std::vector<EventSpec> parse_event_list(const std::string& list) {
    std::vector<EventSpec> specs;
    size_t pos = 0;
    while (true) {
        size_t comma = list.find(',', pos);
        std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        if (item.empty()) throw Error("empty event name in -e '" + list + "'");
        specs.push_back(parse_event(item));
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return specs;
}

perf_event_attr make_attr(const EventSpec& spec, const SamplingConfig& cfg) {
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = spec.type;
    a.config = spec.config;
    if (cfg.use_freq) {
        a.freq = 1;
        a.sample_freq = cfg.freq;
    } else {
        a.sample_period = cfg.period;
    }
    a.sample_type = kDefaultSampleType;
    a.read_format = kDefaultReadFormat;
    a.disabled = 1;        // enabled together once every ring is mapped and armed
    a.sample_id_all = 1;   // non-sample records carry TID/TIME/CPU/IDENTIFIER too
    if (cfg.wakeup_watermark) {
        a.watermark = 1;
        a.wakeup_watermark = cfg.wakeup_watermark;
    } else {
        a.wakeup_events = cfg.wakeup_events;
    }
    return a;
}

}  // namespace ringcap
