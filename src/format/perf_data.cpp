#include "ringcap/perf_data.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <sys/utsname.h>
#include <unistd.h>

#include "ringcap/staging.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

namespace {

constexpr size_t kNameAlign = 64;  // perf's NAME_ALIGN for header strings

struct Out {
    std::vector<std::byte> buf;
    void raw(const void* p, size_t n) {
        auto* b = static_cast<const std::byte*>(p);
        buf.insert(buf.end(), b, b + n);
    }
    template <typename T>
    void put(const T& v) {
        raw(&v, sizeof v);
    }
    // perf_header_string: u32 len (incl. NUL, padded to 64), bytes.
    void str(const std::string& s) {
        uint32_t len = uint32_t((s.size() + 1 + kNameAlign - 1) / kNameAlign * kNameAlign);
        put(len);
        raw(s.data(), s.size());
        buf.resize(buf.size() + (len - s.size()), std::byte{0});
    }
    size_t size() const { return buf.size(); }
};

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The payloads below are laid out as perf 6.1's write_* functions write them (util/header.c) and
// its process_* functions read them back.

void put_strings(Out& o, const std::vector<std::string>& list) {
    o.put(uint32_t(list.size()));
    for (const auto& s : list) o.str(s);
}

// Package lists, core lists, per CPU {core, socket}, then, when there are dies, die lists and per
// CPU die. perf reads one entry per CPU of HEADER_NR_CPUS' "available" count.
void put_cpu_topology(Out& o, const CpuTopology& t) {
    put_strings(o, t.packages);
    put_strings(o, t.cores);
    for (const auto& c : t.cpus) {
        o.put(c.core);
        o.put(c.socket);
    }
    if (t.dies.empty()) return;
    put_strings(o, t.dies);
    for (const auto& c : t.cpus) o.put(c.die);
}

void put_numa_topology(Out& o, const std::vector<NumaNode>& nodes) {
    o.put(uint32_t(nodes.size()));
    for (const auto& n : nodes) {
        o.put(n.id);
        o.put(n.mem_total_kb);
        o.put(n.mem_free_kb);
        o.str(n.cpus);
    }
}

void put_pmu_mappings(Out& o, const std::vector<PmuMapping>& pmus) {
    o.put(uint32_t(pmus.size()));
    for (const auto& p : pmus) {
        o.put(p.type);
        o.str(p.name);
    }
}

void put_caches(Out& o, const std::vector<CacheLevel>& caches) {
    o.put(uint32_t(1));  // version
    o.put(uint32_t(caches.size()));
    for (const auto& c : caches) {
        for (uint32_t v : {c.level, c.line_size, c.sets, c.ways}) o.put(v);
        for (const auto* s : {&c.type, &c.size, &c.map}) o.str(*s);
    }
}

// __write_pmu_caps: u32 nr_caps, then name and value strings per cap; HEADER_PMU_CAPS adds the
// PMU's name after them, and counts the PMUs first (none: the count alone).
void put_pmu_cap_list(Out& o, const PmuCapList& caps) {
    o.put(uint32_t(caps.size()));
    for (const auto& [name, value] : caps) {
        o.str(name);
        o.str(value);
    }
}

void put_pmu_caps(Out& o, const std::vector<PmuCaps>& pmus) {
    o.put(uint32_t(pmus.size()));
    for (const auto& p : pmus) {
        put_pmu_cap_list(o, p.caps);
        o.str(p.pmu);
    }
}

// u64 version 1, block size, nr; per node: node, size in bits, then the bitmap (do_write_bitmap:
// the size again and the u64 words). perf sizes the bitmap to the highest block + 1.
void put_mem_topology(Out& o, const MemTopology& m) {
    o.put(uint64_t(1));
    o.put(m.block_size);
    o.put(uint64_t(m.nodes.size()));
    for (const auto& n : m.nodes) {
        const uint64_t bits = n.blocks.empty() ? 1 : *std::max_element(n.blocks.begin(), n.blocks.end()) + 1;
        std::vector<uint64_t> words((bits + 63) / 64, 0);
        for (uint64_t b : n.blocks) words[b / 64] |= 1ull << (b % 64);
        o.put(n.node);
        o.put(bits);
        o.put(bits);
        o.raw(words.data(), words.size() * sizeof(uint64_t));
    }
}

}  // namespace

HostInfo HostInfo::current(const std::vector<std::string>& argv) {
    HostInfo h;
    utsname u{};
    uname(&u);
    h.hostname = u.nodename;
    h.os_release = u.release;
    h.arch = u.machine;
    h.version = "ringcap 0.1.0";
    h.nr_cpus_available = uint32_t(possible_cpus());
    h.nr_cpus_online = uint32_t(online_cpus().size());
    read_host_topology(h);
    try {
        h.bpf = read_bpf_info();
    } catch (const std::exception&) {
        h.bpf.reset();  // out of memory: the features are left out, the record goes on
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    h.cmdline.push_back(n > 0 ? std::string(exe, size_t(n)) : (argv.empty() ? "ringcap" : argv[0]));
    for (size_t i = 1; i < argv.size(); ++i) h.cmdline.push_back(argv[i]);
    return h;
}

namespace {
uint64_t head_bytes(const std::vector<AttrEntry>& attrs, bool with_ids) {
    uint64_t sz = sizeof(PerfFileHeader) + attrs.size() * (sizeof(perf_event_attr) + sizeof(PerfFileSection));
    if (with_ids)
        for (const auto& a : attrs) sz += a.ids.size() * sizeof(uint64_t);
    return sz;
}
}  // namespace

uint64_t data_offset_for(const std::vector<AttrEntry>& attrs) { return round_up(head_bytes(attrs, true), kStagingAlign); }

bool ids_fit(const std::vector<AttrEntry>& attrs, uint64_t data_offset) { return head_bytes(attrs, true) <= data_offset; }

PerfFileHeader make_file_header(const std::vector<AttrEntry>& attrs, uint64_t data_offset, uint64_t data_size,
                                const uint64_t (&features)[4]) {
    const uint64_t file_attr_size = sizeof(perf_event_attr) + sizeof(PerfFileSection);
    PerfFileHeader h{};
    std::memcpy(h.magic, "PERFILE2", 8);
    h.size = sizeof h;
    h.attr_size = file_attr_size;
    h.attrs = {sizeof(PerfFileHeader), attrs.size() * file_attr_size};
    h.data = {data_offset, data_size};
    h.event_types = {0, 0};
    std::memcpy(h.features, features, sizeof h.features);
    return h;
}

std::vector<std::byte> build_file_head(const std::vector<AttrEntry>& attrs, uint64_t data_offset, uint64_t data_size,
                                       const uint64_t (&features)[4], uint64_t ids_at) {
    const PerfFileHeader h = make_file_header(attrs, data_offset, data_size, features);
    const bool inline_ids = ids_at == 0;
    if (inline_ids && !ids_fit(attrs, data_offset))
        throw std::logic_error("perf.data: the event ids do not fit before the data section");
    Out o;
    o.put(h);
    uint64_t next_ids = inline_ids ? h.attrs.offset + h.attrs.size : ids_at;
    for (const auto& a : attrs) {
        perf_event_attr attr = a.attr;
        attr.size = sizeof(perf_event_attr);
        o.put(attr);
        PerfFileSection ids{next_ids, a.ids.size() * sizeof(uint64_t)};
        o.put(ids);
        next_ids += ids.size;
    }
    if (inline_ids)
        for (const auto& a : attrs) o.raw(a.ids.data(), a.ids.size() * sizeof(uint64_t));
    o.buf.resize(data_offset, std::byte{0});
    return std::move(o.buf);
}

std::vector<std::byte> build_ids_block(const std::vector<AttrEntry>& attrs) {
    Out o;
    for (const auto& a : attrs) o.raw(a.ids.data(), a.ids.size() * sizeof(uint64_t));
    return std::move(o.buf);
}

namespace {

// The feature payloads in bit order, as perf 6.1's write_* functions lay them out: shared by the file's
// feature section (build_features) and pipe mode's HEADER_FEATURE records (build_pipe_head).
std::vector<std::pair<unsigned, Out>> feature_payloads(const std::vector<AttrEntry>& attrs, const HostInfo& host,
                                                       const std::vector<std::byte>& tracing_data,
                                                       const std::vector<std::byte>& build_ids,
                                                       const CompressionFeature* compression,
                                                       const SampleTimeRange* sample_time) {
    std::vector<std::pair<unsigned, Out>> feats;
    auto add = [&](unsigned bit) -> Out& {
        feats.emplace_back(bit, Out{});
        return feats.back().second;
    };
    if (!tracing_data.empty()) add(kFeatTracingData).raw(tracing_data.data(), tracing_data.size());
    if (!build_ids.empty()) add(kFeatBuildId).raw(build_ids.data(), build_ids.size());
    add(kFeatHostname).str(host.hostname);
    add(kFeatOsRelease).str(host.os_release);
    add(kFeatVersion).str(host.version);
    add(kFeatArch).str(host.arch);
    {
        Out& o = add(kFeatNrCpus);
        o.put(host.nr_cpus_available);
        o.put(host.nr_cpus_online);
    }
    if (host.cpudesc) add(kFeatCpuDesc).str(*host.cpudesc);
    if (host.cpuid) add(kFeatCpuId).str(*host.cpuid);
    if (host.total_mem_kb) add(kFeatTotalMem).put(*host.total_mem_kb);
    {
        Out& o = add(kFeatCmdline);
        o.put(uint32_t(host.cmdline.size()));
        for (const auto& s : host.cmdline) o.str(s);
    }
    {
        // u32 nr, u32 attr_size, then per event: attr, u32 nr_ids, name string, ids.
        Out& o = add(kFeatEventDesc);
        o.put(uint32_t(attrs.size()));
        o.put(uint32_t(sizeof(perf_event_attr)));
        for (const auto& a : attrs) {
            perf_event_attr attr = a.attr;
            attr.size = sizeof(perf_event_attr);
            o.put(attr);
            o.put(uint32_t(a.ids.size()));
            o.str(a.name);
            o.raw(a.ids.data(), a.ids.size() * sizeof(uint64_t));
        }
    }
    // perf reads one entry per available CPU: with another count it would misread what follows.
    if (host.cpu_topology && host.cpu_topology->cpus.size() == host.nr_cpus_available)
        put_cpu_topology(add(kFeatCpuTopology), *host.cpu_topology);
    if (host.numa_nodes) put_numa_topology(add(kFeatNumaTopology), *host.numa_nodes);
    if (host.pmu_mappings) put_pmu_mappings(add(kFeatPmuMappings), *host.pmu_mappings);
    if (host.caches) put_caches(add(kFeatCache), *host.caches);
    if (sample_time && sample_time->first > 0 && sample_time->last >= sample_time->first) {
        Out& o = add(kFeatSampleTime);
        o.put(sample_time->first);
        o.put(sample_time->last);
    }
    if (host.mem_topology) put_mem_topology(add(kFeatMemTopology), *host.mem_topology);
    if (host.bpf) {
        const auto progs = bpf_prog_info_payload(*host.bpf), btfs = bpf_btf_payload(*host.bpf);
        add(kFeatBpfProgInfo).raw(progs.data(), progs.size());
        add(kFeatBpfBtf).raw(btfs.data(), btfs.size());
    }
    if (compression) {
        // u32 version (0), type (1 = zstd), level, ratio, mmap_len: as perf writes it.
        Out& o = add(kFeatCompressed);
        o.put(uint32_t(0));
        o.put(uint32_t(1));
        o.put(compression->level);
        o.put(compression->ratio);
        o.put(compression->mmap_len);
    }
    if (host.cpu_pmu_caps) put_pmu_cap_list(add(kFeatCpuPmuCaps), *host.cpu_pmu_caps);
    if (host.pmu_caps) put_pmu_caps(add(kFeatPmuCaps), *host.pmu_caps);
    return feats;
}

}  // namespace

FeatureBlock build_features(const std::vector<AttrEntry>& attrs, const HostInfo& host, uint64_t start,
                            const std::vector<std::byte>& tracing_data, const std::vector<std::byte>& build_ids,
                            const CompressionFeature* compression, const SampleTimeRange* sample_time) {
    FeatureBlock fb;
    auto feats = feature_payloads(attrs, host, tracing_data, build_ids, compression, sample_time);
    // The index of {offset,size} precedes the payloads in the file.
    Out out;
    uint64_t off = start + feats.size() * sizeof(PerfFileSection);
    for (auto& [bit, o] : feats) {
        fb.bitmap[bit / 64] |= 1ull << (bit % 64);
        out.put(PerfFileSection{off, o.size()});
        off += o.size();
    }
    for (auto& [bit, o] : feats) out.raw(o.buf.data(), o.size());
    fb.bytes = std::move(out.buf);
    return fb;
}

std::vector<std::byte> build_pipe_head(const std::vector<AttrEntry>& attrs, const HostInfo& host,
                                       const std::vector<std::byte>& tracing_data,
                                       const CompressionFeature* compression, std::vector<unsigned>* left_out) {
    Out o;
    o.raw("PERFILE2", 8);
    o.put(uint64_t(16));  // header size 16: the pipe header
    for (const auto& a : attrs) {
        const auto rec = build_header_attr(a);
        o.raw(rec.data(), rec.size());
    }
    // Features as perf record synthesizes them for a pipe: no BUILD_ID, no SAMPLE_TIME (known only at
    // the end), TRACING_DATA as a record of its own below, BPF_PROG_INFO and BPF_BTF empty (perf 6.1
    // synthesizes the programs after the features). No HEADER_LAST_FEATURE mark: its number
    // (32 in 6.1) is a real feature in newer perf, which would fail on it; 6.1 only uses it to end
    // `report --header-only` early.
    HostInfo piped = host;
    if (piped.bpf) piped.bpf = BpfInfo{};
    for (auto& [bit, payload] : feature_payloads(attrs, piped, {}, {}, compression, nullptr)) {
        const size_t body = round_up(payload.size(), 8);
        const size_t size = sizeof(perf_event_header) + sizeof(uint64_t) + body;
        if (size > kMaxRecordBytes) {
            if (left_out) left_out->push_back(bit);  // e.g. EVENT_DESC with thousands of ids: perf names events from attrs
            continue;
        }
        o.put(perf_event_header{kRecordHeaderFeature, 0, uint16_t(size)});
        o.put(uint64_t(bit));
        o.raw(payload.buf.data(), payload.size());
        o.buf.resize(o.size() + (body - payload.size()), std::byte{0});
    }
    if (!tracing_data.empty()) {
        // {header (size 16), u32 size, u32 pad}, then `size` bytes not counted in header.size.
        const uint64_t aligned = round_up(tracing_data.size(), 8);
        o.put(perf_event_header{kRecordHeaderTracingData, 0, 16});
        o.put(uint32_t(aligned));
        o.put(uint32_t(0));
        o.raw(tracing_data.data(), tracing_data.size());
        o.buf.resize(o.size() + (aligned - tracing_data.size()), std::byte{0});
    }
    return std::move(o.buf);
}

std::vector<std::byte> build_header_attr(const AttrEntry& a) {
    Out o;
    // perf 6.1 reads the ids right after its own sizeof(perf_event_attr), whatever attr.size says.
    perf_event_attr attr = a.attr;
    attr.size = sizeof(perf_event_attr);
    const size_t size = sizeof(perf_event_header) + sizeof attr + a.ids.size() * sizeof(uint64_t);
    if (size > kMaxRecordBytes)
        throw std::length_error("pipe mode: event '" + a.name + "' has too many ids for one HEADER_ATTR record");
    o.put(perf_event_header{kRecordHeaderAttr, 0, uint16_t(size)});
    o.put(attr);
    o.raw(a.ids.data(), a.ids.size() * sizeof(uint64_t));
    return std::move(o.buf);
}

std::vector<std::byte> compression_anchor(uint64_t at, size_t len, const CompressionFeature& c) {
    // [0, 8)   the padding record's header = feature 0's offset (perf skips feature 0)
    // [8, 16)  feature 0's size
    // [16, 32) HEADER_COMPRESSED's section: {at + 32, 20}
    // [32, 52) its payload
    if (len < kAnchorBytes || len % 8 != 0 || len > kMaxRecordBytes)
        throw std::invalid_argument("compression anchor: bad length");
    std::vector<std::byte> b;
    append_padding(b, len);
    const PerfFileSection comp{at + 32, 5 * sizeof(uint32_t)};
    std::memcpy(b.data() + 16, &comp, sizeof comp);
    const uint32_t payload[5] = {0, 1, c.level, c.ratio, c.mmap_len};
    std::memcpy(b.data() + 32, payload, sizeof payload);
    return b;
}

void append_padding(std::vector<std::byte>& out, size_t n) {
    while (n > 0) {
        const size_t k = std::min(n, kMaxRecordBytes);
        const perf_event_header h{kRecordPadding, 0, uint16_t(k)};
        const size_t at = out.size();
        out.resize(at + k, std::byte{0});
        std::memcpy(out.data() + at, &h, sizeof h);
        n -= k;
    }
}

LostSamplesRecord make_lost_samples(uint64_t id, int cpu, uint64_t lost) {
    LostSamplesRecord r{};
    r.header = {PERF_RECORD_LOST_SAMPLES, 0, sizeof(LostSamplesRecord)};
    r.lost = lost;
    r.pid = r.tid = uint32_t(-1);
    r.time = 0;
    r.cpu = uint32_t(cpu);
    r.id = id;
    return r;
}

}  // namespace ringcap
