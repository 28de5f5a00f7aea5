// The host description perf record puts in its header features (CPUDESC, CPUID, TOTAL_MEM, CPU,
// NUMA and memory topology, PMU mappings and capabilities, caches), read from /proc and /sys the way perf 6.1 reads
// them (tools/perf/util/header.c, cputopo.c, cpumap.c), so perf shows the same for our files. What
// cannot be read is left out, as perf leaves it out; nothing here fails a record.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string_view>
#include <unistd.h>

#include "ringcap/perf_data.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

namespace {

// The file's first line without its newline, as perf's getline() callers see it.
std::optional<std::string> first_line(const std::string& path) {
    auto text = read_text_file(path);
    if (!text || text->empty()) return std::nullopt;
    return text->substr(0, text->find('\n'));
}

// The whole file without surrounding whitespace (sysfs__read_str + strim).
std::optional<std::string> trimmed(const std::string& path) {
    auto text = read_text_file(path);
    if (!text) return std::nullopt;
    const auto b = text->find_first_not_of(" \t\n\r\v\f");
    if (b == std::string::npos) return "";
    return text->substr(b, text->find_last_not_of(" \t\n\r\v\f") - b + 1);
}

// sysfs__read_int: atoi of what the file holds; nullopt if it is missing or empty.
std::optional<int32_t> read_int(const std::string& path) {
    auto text = read_text_file(path);
    if (!text || text->empty()) return std::nullopt;
    return int32_t(std::strtol(text->c_str(), nullptr, 10));
}

std::optional<uint64_t> parse_u64(std::string_view s, int base = 10) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    if (base == 16 && (s.starts_with("0x") || s.starts_with("0X"))) s.remove_prefix(2);
    uint64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (r.ec != std::errc{}) return std::nullopt;
    return v;
}

// The numbers N of the entries named <prefix>N in `dir`, in readdir order (as perf lists them);
// nullopt if the directory cannot be read.
std::optional<std::vector<uint64_t>> numbered_entries(const std::string& dir, std::string_view prefix) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::vector<uint64_t> out;
    fs::directory_iterator it(dir, ec);
    if (ec) return std::nullopt;
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!name.starts_with(prefix)) continue;
        if (auto n = parse_u64(std::string_view(name).substr(prefix.size()))) out.push_back(*n);
    }
    if (ec) return std::nullopt;
    return out;
}

// Highest CPU in a sysfs CPU list file + 1 (cpu__max_cpu, cpu__max_present_cpu).
std::optional<uint32_t> cpu_count(const std::string& path) {
    auto text = read_text_file(path);
    auto cpus = text ? parse_cpu_list(*text) : std::nullopt;
    if (!cpus || cpus->empty()) return std::nullopt;
    return uint32_t(cpus->back() + 1);
}

// --- /proc/cpuinfo ---

// The value of the first "key : value" line with this key, whitespace runs squashed to one space
// as __write_cpudesc does.
std::optional<std::string> cpuinfo_field(const std::string& cpuinfo, std::string_view key) {
    std::istringstream in(cpuinfo);
    for (std::string line; std::getline(in, line);) {
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string_view k(line.data(), colon);
        while (!k.empty() && (k.back() == ' ' || k.back() == '\t')) k.remove_suffix(1);
        if (k != key) continue;
        // perf keeps the whole line when nothing follows ": ".
        std::string v = colon + 2 < line.size() && line[colon + 1] == ' ' ? line.substr(colon + 2) : line;
        std::string out;
        for (char c : v) {
            if (std::string_view(" \t\n\v\f\r").find(c) == std::string_view::npos) out += c;
            else if (out.empty() || out.back() != ' ') out += ' ';  // only after whitespace
        }
        return out;
    }
    return std::nullopt;
}

// perf's CPUINFO_PROC: the field that names the CPU on this architecture.
std::vector<std::string_view> cpudesc_keys() {
#if defined(__powerpc__) || defined(__hppa__) || defined(__sparc__)
    return {"cpu"};
#elif defined(__s390__)
    return {"vendor_id"};
#elif defined(__arm__)
    return {"model name", "Processor"};
#elif defined(__loongarch__)
    return {"Model Name"};
#else
    return {"model name"};
#endif
}

std::optional<std::string> read_cpudesc(const std::string& cpuinfo) {
    for (auto key : cpudesc_keys())
        if (auto v = cpuinfo_field(cpuinfo, key)) return v;
    return std::nullopt;
}

bool is_x86(const std::string& arch) {
    return arch == "x86_64" || (arch.size() == 4 && arch[0] == 'i' && arch.ends_with("86"));
}

// x86: "vendor,family,model,stepping" (arch/x86/util/header.c, from the cpuid instruction, whose
// family and model the kernel shows in cpuinfo the same way). aarch64: the first online CPU's
// MIDR_EL1, as arch/arm64/util/header.c reads it. Elsewhere perf has its own sources: left out.
std::optional<std::string> read_cpuid(const std::string& cpuinfo, const std::string& arch, const std::string& sys) {
    if (is_x86(arch)) {
        auto out = cpuinfo_field(cpuinfo, "vendor_id");
        for (auto key : {"cpu family", "model", "stepping"}) {
            auto v = cpuinfo_field(cpuinfo, key);
            auto n = v ? parse_u64(*v) : std::nullopt;
            if (!out || !n) return std::nullopt;
            // Appended in two steps: GCC 12 at -O2 sees a false overlap in `"," + to_string` (-Wrestrict).
            out->push_back(',');
            out->append(std::to_string(*n));
        }
        return out;
    }
    if (arch == "aarch64") {
        auto online = read_text_file(sys + "/devices/system/cpu/online");
        for (int cpu : online ? parse_cpu_list(*online).value_or(std::vector<int>{}) : std::vector<int>{})
            if (auto midr = first_line(sys + "/devices/system/cpu/cpu" + std::to_string(cpu) +
                                       "/regs/identification/midr_el1"))
                return midr->substr(0, 18);  // fgets into perf's 19-byte buffer
    }
    return std::nullopt;
}

std::optional<uint64_t> read_total_mem(const std::string& proc) {
    auto text = read_text_file(proc + "/meminfo");
    if (!text) return std::nullopt;
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);)
        if (line.starts_with("MemTotal:")) return parse_u64(std::string_view(line).substr(9));
    return std::nullopt;
}

// --- CPU topology (cputopo.c: cpu_topology__new; env.c: perf_env__read_cpu_topology_map) ---

// Adds the list to `lists` unless it is there already; false if the file cannot be read.
bool add_sibling_list(std::vector<std::string>& lists, const std::string& path) {
    auto line = first_line(path);
    if (!line) return false;
    if (std::find(lists.begin(), lists.end(), *line) == lists.end()) lists.push_back(*line);
    return true;
}

// The newer sysfs name, or the older one where the kernel does not have it.
std::string either(const std::string& dir, const char* name, const char* old_name) {
    const std::string p = dir + name;
    return access(p.c_str(), F_OK) == 0 ? p : dir + old_name;
}

bool has_die_topology(const std::string& cpu_dir, const std::string& arch) {
    return (arch.starts_with("x86_64") || arch.starts_with("s390x")) &&
           access((cpu_dir + "cpu0/topology/die_cpus_list").c_str(), F_OK) == 0;
}

std::optional<CpuTopology> read_cpu_topology(const std::string& sys, const std::string& arch, uint32_t nr_cpus) {
    const std::string cpu_dir = sys + "/devices/system/cpu/";
    auto online_text = read_text_file(cpu_dir + "online");
    auto online = online_text ? parse_cpu_list(*online_text) : std::nullopt;
    if (!online) return std::nullopt;
    const bool dies = has_die_topology(cpu_dir, arch);
    CpuTopology t;
    bool any = false;  // perf gives up unless every online CPU it looks at has something readable
    for (int cpu : *online) {
        if (uint32_t(cpu) >= nr_cpus) break;
        const std::string topo = cpu_dir + "cpu" + std::to_string(cpu) + "/topology/";
        bool ok = add_sibling_list(t.packages, either(topo, "package_cpus_list", "core_siblings_list"));
        if (dies) ok |= add_sibling_list(t.dies, topo + "die_cpus_list");
        ok |= add_sibling_list(t.cores, either(topo, "core_cpus_list", "thread_siblings_list"));
        if (!ok) return std::nullopt;
        any = true;
    }
    if (!any) return std::nullopt;
    for (uint32_t cpu = 0; cpu < nr_cpus; ++cpu) {
        const std::string topo = cpu_dir + "cpu" + std::to_string(cpu) + "/topology/";
        t.cpus.push_back({read_int(topo + "core_id").value_or(-1), read_int(topo + "physical_package_id").value_or(-1),
                          read_int(topo + "die_id").value_or(-1)});
    }
    return t;
}

// --- NUMA (cputopo.c: numa_topology__new) ---

std::optional<NumaNode> read_numa_node(const std::string& node_dir, int node) {
    NumaNode n;
    n.id = uint32_t(node);
    const std::string dir = node_dir + "node" + std::to_string(node) + "/";
    auto meminfo = read_text_file(dir + "meminfo");
    if (!meminfo) return std::nullopt;
    std::istringstream in(*meminfo);
    // "Node 0 MemTotal:       9135904 kB"
    for (std::string line; std::getline(in, line) && !(n.mem_total_kb && n.mem_free_kb);) {
        if (line.find(':') == std::string::npos) continue;
        std::istringstream ls(line);
        std::string word, field;
        long long nr = 0;
        uint64_t kb = 0;
        if (!(ls >> word >> nr >> field >> kb)) return std::nullopt;
        if (field == "MemTotal:") n.mem_total_kb = kb;
        if (field == "MemFree:") n.mem_free_kb = kb;
    }
    auto cpus = first_line(dir + "cpulist");
    if (!cpus) return std::nullopt;
    n.cpus = *cpus;
    return n;
}

std::optional<std::vector<NumaNode>> read_numa_nodes(const std::string& sys) {
    const std::string node_dir = sys + "/devices/system/node/";
    auto online = first_line(node_dir + "online");
    auto nodes = online ? parse_cpu_list(*online) : std::nullopt;
    if (!nodes) return std::nullopt;
    std::vector<NumaNode> out;
    for (int node : *nodes) {
        auto n = read_numa_node(node_dir, node);
        if (!n) return std::nullopt;
        out.push_back(*n);
    }
    return out;
}

// --- PMUs (pmu.c: pmu_read_sysfs, in readdir order) ---

std::vector<PmuMapping> read_pmu_mappings(const std::string& sys) {
    namespace fs = std::filesystem;
    std::vector<PmuMapping> out;  // perf writes an empty list when there is no such directory
    std::error_code ec;
    fs::directory_iterator it(sys + "/bus/event_source/devices", ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        auto text = read_text_file(it->path().string() + "/type");
        auto type = text ? parse_u64(*text) : std::nullopt;
        if (type) out.push_back({uint32_t(*type), name});  // perf skips a PMU without a type
    }
    return out;
}

// --- PMU capabilities (pmu.c: perf_pmu__caps_parse; header.c: write_cpu_pmu_caps, write_pmu_caps) ---

// A PMU's caps/ directory in readdir order: each file's first line (fgets, at most 127 bytes) less
// its last character (perf_pmu__new_caps' strndup(value, strlen - 1)); a file that cannot be read or
// is empty is skipped. No directory: no caps.
PmuCapList read_caps(const std::string& dir) {
    namespace fs = std::filesystem;
    PmuCapList out;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        auto text = read_text_file(it->path().string());
        if (!text || text->empty()) continue;
        const size_t nl = text->find('\n');
        std::string value = text->substr(0, std::min(nl == std::string::npos ? text->size() : nl + 1, size_t(127)));
        value.pop_back();
        out.emplace_back(it->path().filename().string(), value);
    }
    return out;
}

// HEADER_CPU_PMU_CAPS holds the "cpu" PMU's caps (perf leaves the feature out without that PMU);
// HEADER_PMU_CAPS every other PMU that has caps, the hybrid core PMUs (cpu_core, cpu_atom) first,
// then the rest in readdir order.
void read_pmu_caps(HostInfo& h, const std::string& sys) {
    namespace fs = std::filesystem;
    const std::string devices = sys + "/bus/event_source/devices";
    if (fs::is_directory(devices + "/cpu")) h.cpu_pmu_caps = read_caps(devices + "/cpu/caps");
    std::vector<PmuCaps> hybrid, others;
    std::error_code ec;
    fs::directory_iterator it(devices, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name == "cpu") continue;
        PmuCaps p{name, read_caps(it->path().string() + "/caps")};
        if (p.caps.empty()) continue;
        (name.starts_with("cpu_") ? hybrid : others).push_back(std::move(p));
    }
    hybrid.insert(hybrid.end(), std::make_move_iterator(others.begin()), std::make_move_iterator(others.end()));
    h.pmu_caps = std::move(hybrid);
}

// --- caches (header.c: build_caches, cpu_cache_level__read) ---

constexpr int kMaxCacheLevel = 4;  // perf's MAX_CACHE_LVL: index0..index3

std::optional<CacheLevel> read_cache(const std::string& dir) {
    CacheLevel c;
    auto level = read_int(dir + "level"), line = read_int(dir + "coherency_line_size"),
         sets = read_int(dir + "number_of_sets"), ways = read_int(dir + "ways_of_associativity");
    auto type = trimmed(dir + "type"), size = trimmed(dir + "size"), map = trimmed(dir + "shared_cpu_list");
    if (!level || !line || !sets || !ways || !type || !size || !map) return std::nullopt;
    return CacheLevel{uint32_t(*level), uint32_t(*line), uint32_t(*sets), uint32_t(*ways), *type, *size, *map};
}

std::optional<std::vector<CacheLevel>> read_caches(const std::string& sys, uint32_t fallback_cpus) {
    const std::string cpu_dir = sys + "/devices/system/cpu/";
    const uint32_t nr = cpu_count(cpu_dir + "possible").value_or(fallback_cpus);
    std::vector<CacheLevel> out;
    for (uint32_t cpu = 0; cpu < nr; ++cpu) {
        for (int idx = 0; idx < kMaxCacheLevel; ++idx) {
            const std::string dir = cpu_dir + "cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(idx) + "/";
            if (access(dir.c_str(), F_OK) != 0) break;  // no more levels (or an offline CPU)
            auto c = read_cache(dir);
            if (!c) return std::nullopt;  // perf drops the whole feature
            if (std::find(out.begin(), out.end(), *c) == out.end()) out.push_back(*c);
        }
    }
    // perf's qsort by level is glibc's merge sort: stable.
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.level < b.level; });
    return out;
}

// --- memory (header.c: build_mem_topology, memory_node__read) ---

std::optional<MemTopology> read_mem_topology(const std::string& sys) {
    auto bsize_text = first_line(sys + "/devices/system/memory/block_size_bytes");
    auto bsize = bsize_text ? parse_u64(*bsize_text, 16) : std::nullopt;
    const std::string node_dir = sys + "/devices/system/node/";
    auto nodes = numbered_entries(node_dir, "node");
    if (!bsize || !nodes) return std::nullopt;
    MemTopology m;
    m.block_size = *bsize;
    for (uint64_t node : *nodes) {
        auto blocks = numbered_entries(node_dir + "node" + std::to_string(node), "memory");
        if (!blocks) return std::nullopt;
        m.nodes.push_back({node, *blocks});
    }
    std::sort(m.nodes.begin(), m.nodes.end(), [](const auto& a, const auto& b) { return a.node < b.node; });
    return m;
}

// Each reader on its own: one that fails (even by throwing, e.g. out of memory) leaves only its
// feature out.
template <typename T, typename F>
void guarded(std::optional<T>& field, F&& read) {
    try {
        field = read();
    } catch (const std::exception&) {
        field.reset();
    }
}

}  // namespace

void read_host_topology(HostInfo& h, const HostRoots& r) {
    const std::string cpuinfo = read_text_file(r.proc + "/cpuinfo").value_or("");
    guarded(h.cpudesc, [&] { return read_cpudesc(cpuinfo); });
    guarded(h.cpuid, [&] { return read_cpuid(cpuinfo, h.arch, r.sys); });
    guarded(h.total_mem_kb, [&] { return read_total_mem(r.proc); });
    guarded(h.cpu_topology, [&] { return read_cpu_topology(r.sys, h.arch, h.nr_cpus_available); });
    guarded(h.numa_nodes, [&] { return read_numa_nodes(r.sys); });
    guarded(h.pmu_mappings, [&] { return std::optional(read_pmu_mappings(r.sys)); });
    try {
        read_pmu_caps(h, r.sys);
    } catch (const std::exception&) {
        h.cpu_pmu_caps.reset();
        h.pmu_caps.reset();
    }
    guarded(h.caches, [&] { return read_caches(r.sys, h.nr_cpus_available); });
    guarded(h.mem_topology, [&] { return read_mem_topology(r.sys); });
}

}  // namespace ringcap
