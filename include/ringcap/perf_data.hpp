// perf.data "file mode" layout (tools/perf/Documentation/perf.data-file-format.txt):
//   header (104 bytes) | attrs: {perf_event_attr, ids section}[] | ids | pad | data | feature index | features
// The data section starts on a 4 KiB boundary so staging buffers can be written with O_DIRECT.
#pragma once

#include <cstddef>
#include <cstdint>
#include <linux/perf_event.h>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ringcap/bpf_info.hpp"
#include "ringcap/dsos.hpp"
#include "ringcap/records.hpp"

namespace ringcap {

// Feature bits perf knows (tools/perf/util/header.h); we write a subset.
enum PerfFeature : unsigned {
    kFeatReserved = 0,
    kFeatTracingData = 1,
    kFeatBuildId = 2,
    kFeatHostname = 3,
    kFeatOsRelease = 4,
    kFeatVersion = 5,
    kFeatArch = 6,
    kFeatNrCpus = 7,
    kFeatCpuDesc = 8,
    kFeatCpuId = 9,
    kFeatTotalMem = 10,
    kFeatCmdline = 11,
    kFeatEventDesc = 12,
    kFeatCpuTopology = 13,
    kFeatNumaTopology = 14,
    kFeatPmuMappings = 16,
    kFeatCache = 20,
    kFeatSampleTime = 21,
    kFeatMemTopology = 22,
    kFeatBpfProgInfo = 25,
    kFeatBpfBtf = 26,
    kFeatCompressed = 27,
    kFeatCpuPmuCaps = 28,
    kFeatPmuCaps = 31,
};

// HEADER_COMPRESSED: zstd, its level, the ratio (for display), and the most bytes one
// PERF_RECORD_COMPRESSED record decompresses to (perf sizes its decompression buffer with it).
struct CompressionFeature {
    uint32_t level = 1;
    uint32_t ratio = 1;
    uint32_t mmap_len = 0;
};

struct PerfFileSection {
    uint64_t offset;
    uint64_t size;
};

struct PerfFileHeader {
    char magic[8];  // "PERFILE2"
    uint64_t size;  // sizeof(PerfFileHeader)
    uint64_t attr_size;
    PerfFileSection attrs;
    PerfFileSection data;
    PerfFileSection event_types;
    uint64_t features[4];
};
static_assert(sizeof(PerfFileHeader) == 104);

struct AttrEntry {
    perf_event_attr attr{};
    std::string name;
    std::vector<uint64_t> ids;
};

// HEADER_CPU_TOPOLOGY as perf's cpu_topology__new and perf_env__read_cpu_topology_map see it.
struct CpuTopology {
    // Distinct sibling lists ("0-3"), in order of first appearance over the online CPUs; dies only
    // where perf writes them (x86_64 and s390x with die_cpus_list).
    std::vector<std::string> packages, cores, dies;
    struct Ids {
        int32_t core = -1, socket = -1, die = -1;  // -1: unreadable (an offline CPU)
    };
    std::vector<Ids> cpus;  // one per CPU in [0, HostInfo::nr_cpus_available)
};

struct NumaNode {
    uint32_t id = 0;
    uint64_t mem_total_kb = 0, mem_free_kb = 0;
    std::string cpus;  // cpulist, "0-1"
};

struct PmuMapping {
    uint32_t type = 0;
    std::string name;
};

// A PMU's capabilities (sysfs caps/): each file's name and its first line without its last
// character, as perf_pmu__caps_parse reads them.
using PmuCapList = std::vector<std::pair<std::string, std::string>>;
struct PmuCaps {
    std::string pmu;  // sysfs name, "ibs_op"
    PmuCapList caps;
};

struct CacheLevel {
    uint32_t level = 0, line_size = 0, sets = 0, ways = 0;
    std::string type, size, map;  // "Data", "32K", shared_cpu_list
    bool operator==(const CacheLevel&) const = default;
};

struct MemoryNode {
    uint64_t node = 0;
    std::vector<uint64_t> blocks;  // the N of its memoryN entries
};

struct MemTopology {
    uint64_t block_size = 0;
    std::vector<MemoryNode> nodes;  // by node number
};

struct HostInfo {
    std::string hostname, os_release, version, arch;
    uint32_t nr_cpus_available = 0, nr_cpus_online = 0;
    std::vector<std::string> cmdline;  // program path first
    // Features perf record writes when it can read their source; unset ones are left out, as perf
    // leaves them out (read_host_topology, host_topology.cpp).
    std::optional<std::string> cpudesc, cpuid;
    std::optional<uint64_t> total_mem_kb;
    std::optional<CpuTopology> cpu_topology;
    std::optional<std::vector<NumaNode>> numa_nodes;
    std::optional<std::vector<PmuMapping>> pmu_mappings;
    std::optional<std::vector<CacheLevel>> caches;  // deduplicated and ordered by level, as perf
    std::optional<MemTopology> mem_topology;
    std::optional<PmuCapList> cpu_pmu_caps;      // HEADER_CPU_PMU_CAPS: the "cpu" PMU's, if it exists
    std::optional<std::vector<PmuCaps>> pmu_caps;  // HEADER_PMU_CAPS: every other PMU with caps
    // HEADER_BPF_PROG_INFO and HEADER_BPF_BTF (HostInfo::current: the programs loaded now).
    std::optional<BpfInfo> bpf;
    static HostInfo current(const std::vector<std::string>& argv);
};

// Where the host's /proc and /sys are read from (another tree in tests).
struct HostRoots {
    std::string proc = "/proc", sys = "/sys";
};
// Fills the optional features of `host` (its arch and nr_cpus_available must be set) as perf 6.1
// reads them. Never throws: what cannot be read stays unset.
void read_host_topology(HostInfo& host, const HostRoots& roots = {});

// HEADER_SAMPLE_TIME: the times of the first and last sample.
struct SampleTimeRange {
    uint64_t first = 0, last = 0;
};

// Where the data section starts for these attrs: after header, attrs and ids, rounded up to 4 KiB.
// It stays there for the whole record, even when events (and ids) are added later.
uint64_t data_offset_for(const std::vector<AttrEntry>& attrs);
// Whether header, attrs and ids still fit before `data_offset`.
bool ids_fit(const std::vector<AttrEntry>& attrs, uint64_t data_offset);

// The 104-byte file header alone (no allocation: used to refresh the header while recording).
PerfFileHeader make_file_header(const std::vector<AttrEntry>& attrs, uint64_t data_offset, uint64_t data_size,
                                const uint64_t (&features)[4]);

// Header + attrs, and the ids right after them (they must fit: ids_fit), exactly data_offset bytes,
// zero padded. With ids_at != 0 the attrs point at ids_at instead, where the caller writes
// build_ids_block(attrs) (after the features, when ids were added beyond the room before the data).
std::vector<std::byte> build_file_head(const std::vector<AttrEntry>& attrs, uint64_t data_offset, uint64_t data_size,
                                       const uint64_t (&features)[4], uint64_t ids_at = 0);
std::vector<std::byte> build_ids_block(const std::vector<AttrEntry>& attrs);

// Feature index + payloads that go right after the data section (at `start`), and the bitmap to put
// in the header.
struct FeatureBlock {
    std::vector<std::byte> bytes;
    uint64_t bitmap[4] = {0, 0, 0, 0};
};
// `tracing_data` / `build_ids`, if not empty, become HEADER_TRACING_DATA / HEADER_BUILD_ID;
// `compression`, if given, HEADER_COMPRESSED; `sample_time`, if given with last >= first > 0,
// HEADER_SAMPLE_TIME.
FeatureBlock build_features(const std::vector<AttrEntry>& attrs, const HostInfo& host, uint64_t start,
                            const std::vector<std::byte>& tracing_data = {},
                            const std::vector<std::byte>& build_ids = {},
                            const CompressionFeature* compression = nullptr,
                            const SampleTimeRange* sample_time = nullptr);

// Pipe mode (`-o -`): what precedes the record stream. The pipe header {"PERFILE2", 16}, one
// PERF_RECORD_HEADER_ATTR per event (attr and its ids), one PERF_RECORD_HEADER_FEATURE per feature
// (the file-mode payload, padded to 8 bytes; no BUILD_ID or SAMPLE_TIME, as perf record in pipe
// mode), and with tracepoints PERF_RECORD_HEADER_TRACING_DATA followed by `tracing_data`. A feature
// too big for one record (u16 size) is left out and its bit added to `left_out`. Throws
// std::length_error if an event has too many ids for one HEADER_ATTR record.
std::vector<std::byte> build_pipe_head(const std::vector<AttrEntry>& attrs, const HostInfo& host,
                                       const std::vector<std::byte>& tracing_data = {},
                                       const CompressionFeature* compression = nullptr,
                                       std::vector<unsigned>* left_out = nullptr);
// One PERF_RECORD_HEADER_ATTR record: perf 6.1 adds an event (evsel) for it with these ids.
std::vector<std::byte> build_header_attr(const AttrEntry& a);

// Crash safety of compressed files. perf reads the feature index at the end of the data and cannot
// read COMPRESSED records without HEADER_COMPRESSED, but while recording the data grows into the
// space after it. A compression anchor is both: a padding record (PERF_RECORD_FINISHED_INIT, which
// perf skips) of `len` bytes written at file offset `at`, and, for a header whose data ends at `at`
// with kAnchorFeatures, a feature index: its first entry (feature 0, which perf ignores) is the
// record's header, the second points at the HEADER_COMPRESSED payload inside the record. So the
// header may name any anchor as the data's end and it stays valid when the data grows past it.
inline constexpr size_t kAnchorBytes = 64;
inline constexpr uint64_t kAnchorFeatures[4] = {(1ull << kFeatReserved) | (1ull << kFeatCompressed), 0, 0, 0};
std::vector<std::byte> compression_anchor(uint64_t at, size_t len, const CompressionFeature& c);

struct BuildIdEntry {
    std::string filename;  // "[kernel.kallsyms]" for the kernel
    std::vector<uint8_t> id;
    bool kernel = false;
    DsoRef dso;  // for a file: how to open it again, checked (dso_files.hpp)
};
// NT_GNU_BUILD_ID in a buffer of ELF notes.
std::optional<std::vector<uint8_t>> find_build_id_note(const unsigned char* p, size_t len);
// GNU build-id of the running kernel (/sys/kernel/notes).
std::optional<std::vector<uint8_t>> kernel_build_id();
// The HEADER_BUILD_ID payload.
std::vector<std::byte> build_build_id_feature(const std::vector<BuildIdEntry>& entries);

// The HEADER_TRACING_DATA payload for these (system, event) tracepoints, read from tracefs.
std::vector<std::byte> build_tracing_data(const std::string& tracefs,
                                          const std::vector<std::pair<std::string, std::string>>& tracepoints);

}  // namespace ringcap
