#include <algorithm>
#include <cstring>
#include <dirent.h>
#include <fnmatch.h>
#include <sys/stat.h>
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

std::string tracefs_root() {
    for (const char* dir : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}) {
        struct stat st{};
        if (stat((std::string(dir) + "/events").c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return dir;
    }
    return "";
}

EventSpec tracking_event() {
    EventSpec e{"dummy:u", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY, {}, {}, true};
    return e;
}

namespace {

std::string need_tracefs(const std::string& name) {
    return "tracepoint '" + name +
           "' needs tracefs: mount it with 'mount -t tracefs nodev /sys/kernel/tracing' (as root)";
}

// "sys:name[:modifiers]" (globs allowed in both names) -> one spec per matching tracepoint.
std::vector<EventSpec> parse_tracepoints(const std::string& item) {
    const auto colon = item.find(':'), second = item.find(':', colon + 1);
    const std::string name = item.substr(0, second);
    const EventModifiers mods =
        second == std::string::npos ? EventModifiers{} : parse_modifiers(item.substr(second + 1), item);
    const std::string root = tracefs_root();
    if (root.empty()) throw Error(need_tracefs(name));
    const std::string sys_pat = name.substr(0, colon), ev_pat = name.substr(colon + 1);
    std::vector<EventSpec> out;
    auto list_dirs = [](const std::string& dir) {
        // Directory order, not sorted: perf opens a glob's matches in tracefs's order.
        std::vector<std::string> v;
        if (DIR* d = opendir(dir.c_str())) {
            while (dirent* e = readdir(d))
                if (e->d_name[0] != '.') v.push_back(e->d_name);
            closedir(d);
        }
        return v;
    };
    for (const auto& sys : list_dirs(root + "/events")) {
        if (fnmatch(sys_pat.c_str(), sys.c_str(), 0) != 0) continue;
        for (const auto& ev : list_dirs(root + "/events/" + sys)) {
            if (fnmatch(ev_pat.c_str(), ev.c_str(), 0) != 0) continue;
            auto id = read_text_file(root + "/events/" + sys + "/" + ev + "/id");
            if (!id) continue;
            EventSpec spec;
            spec.name = sys + ":" + ev;
            spec.type = PERF_TYPE_TRACEPOINT;
            spec.config = std::stoull(*id);
            spec.tp_system = sys;
            spec.tp_event = ev;
            spec.mods = mods;  // perf 6.1 names a tracepoint without its modifiers
            out.push_back(spec);
        }
    }
    if (out.empty())
        throw Error("unknown tracepoint '" + name + "': no match under " + root +
                    "/events (see perf list tracepoint)");
    return out;
}

}  // namespace

namespace {
const Named* find_named(const std::string& name) {
    for (const auto& e : kEvents)
        if (name == e.name) return &e;
    return nullptr;
}
}  // namespace

EventModifiers parse_modifiers(const std::string& letters, const std::string& event) {
    // perf's get_event_modifier(): the first of u/k/h excludes all three privilege levels, and each
    // letter then includes its own; likewise G/H; u and p also exclude guests unless G/H were given.
    EventModifiers m;
    bool levels = false, guest_host = false;
    int precise = 0;
    for (char c : letters) {
        switch (c) {
            case 'u':
            case 'k':
            case 'h':
                if (!levels) levels = m.exclude_user = m.exclude_kernel = m.exclude_hv = true;
                (c == 'u' ? m.exclude_user : c == 'k' ? m.exclude_kernel : m.exclude_hv) = false;
                if (c == 'u' && !guest_host) m.exclude_guest = true;
                break;
            case 'G':
            case 'H':
                if (!guest_host) guest_host = m.exclude_guest = m.exclude_host = true;
                (c == 'G' ? m.exclude_guest : m.exclude_host) = false;
                break;
            case 'p':
                ++precise;
                if (!guest_host) m.exclude_guest = true;  // perf: precise requires exclude_guest
                break;
            case 'P':
                precise = 3;  // the highest level (x86's)
                break;
            default:
                throw Error("event '" + event + "': modifier '" + std::string(1, c) +
                            (std::string("IWSDebRrx").find(c) != std::string::npos
                                 ? "' is one of perf's that ringcap does not implement"
                                 : "' is not one of perf's") +
                            "; ringcap takes u, k, h, G, H, p, pp, ppp and P");
        }
    }
    if (precise > 3) throw Error("event '" + event + "': at most 3 p modifiers (ppp)");
    m.precise_ip = uint8_t(precise);
    return m;
}

EventSpec parse_event(const std::string& name) {
    const auto colon = name.find(':');
    const std::string base = name.substr(0, colon);
    if (const Named* e = find_named(base)) {
        EventSpec spec{name, e->type, e->config, {}, {}, false};
        if (colon != std::string::npos) spec.mods = parse_modifiers(name.substr(colon + 1), name);
        return spec;
    }
    throw Error("unknown event '" + name +
                "': use one of cpu-clock, task-clock, page-faults, context-switches, cpu-migrations, "
                "minor-faults, major-faults, dummy, or a hardware event (cycles, instructions, ...), with perf's "
                "modifiers (:u, :k, :ppp ...), or a tracepoint (system:name)");
}

EventSpec default_event() {
    EventSpec spec = parse_event("cpu-clock");
    spec.name = "cpu-clock:ppp";
    spec.mods.precise_ip = 3;
    return spec;
}

std::vector<EventSpec> parse_event_list(const std::string& list) {
    std::vector<EventSpec> specs;
    size_t pos = 0;
    while (true) {
        size_t comma = list.find(',', pos);
        std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        if (item.empty()) throw Error("empty event name in -e '" + list + "'");
        // "name:mods" is an event with modifiers; "system:name[:mods]" a tracepoint.
        if (item.find(':') != std::string::npos && !find_named(item.substr(0, item.find(':')))) {
            for (auto& tp : parse_tracepoints(item)) specs.push_back(std::move(tp));
        } else {
            specs.push_back(parse_event(item));
        }
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
    if (spec.type == PERF_TYPE_TRACEPOINT) {
        // perf samples every hit of a tracepoint unless -c says otherwise; RAW carries its fields.
        a.sample_type |= PERF_SAMPLE_RAW;
        a.freq = 0;
        a.sample_period = cfg.use_freq ? 1 : cfg.period;
    }
    if (spec.tracking) {
        // Never samples; carries process and mapping events for perf report (as perf's dummy:u).
        a.freq = 0;
        a.sample_period = 1;
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        a.mmap = 1;
        a.mmap2 = 1;
        a.comm = 1;
        a.comm_exec = 1;
        a.task = 1;
        // BPF programs and JIT code loaded during the record get their symbols (as perf's tracking event).
        a.ksymbol = 1;
        a.bpf_event = 1;
        // Dwarf unwinding reads .eh_frame, which lives in a read-only, non-executable segment of
        // modern binaries: perf report needs those mappings too.
        if (cfg.call_graph == CallGraph::Dwarf) a.mmap_data = 1;
    }
    if (cfg.call_graph != CallGraph::None && !spec.tracking) {
        a.sample_type |= PERF_SAMPLE_CALLCHAIN;
        if (cfg.max_stack) a.sample_max_stack = cfg.max_stack;
        if (cfg.call_graph == CallGraph::Dwarf) {
            // The kernel part of the chain comes from the kernel; the user part is unwound by perf
            // from a copy of the user stack and registers, as perf record --call-graph dwarf does.
            a.sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
            a.sample_regs_user = kDwarfRegsMask;
            a.sample_stack_user = cfg.stack_size;
            a.exclude_callchain_user = 1;
        }
    }
    if (!spec.tracking) {
        a.exclude_user = spec.mods.exclude_user;
        a.exclude_kernel = spec.mods.exclude_kernel;
        a.exclude_hv = spec.mods.exclude_hv;
        a.exclude_guest = spec.mods.exclude_guest;
        a.exclude_host = spec.mods.exclude_host;
        a.precise_ip = spec.mods.precise_ip;
    }
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
