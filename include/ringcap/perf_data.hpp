// perf.data "file mode" layout (tools/perf/Documentation/perf.data-file-format.txt):
//   header (104 bytes) | attrs: {perf_event_attr, ids section}[] | ids | pad | data | feature index | features
// The data section starts on a 4 KiB boundary so staging buffers can be written with O_DIRECT.
#pragma once

#include <cstddef>
#include <cstdint>
#include <linux/perf_event.h>
#include <optional>
#include <string>
#include <vector>

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
    kFeatCmdline = 11,
    kFeatEventDesc = 12,
    kFeatCompressed = 27,
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

struct HostInfo {
    std::string hostname, os_release, version, arch;
    uint32_t nr_cpus_available = 0, nr_cpus_online = 0;
    std::vector<std::string> cmdline;  // program path first
    static HostInfo current(const std::vector<std::string>& argv);
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
// `compression`, if given, HEADER_COMPRESSED.
FeatureBlock build_features(const std::vector<AttrEntry>& attrs, const HostInfo& host, uint64_t start,
                            const std::vector<std::byte>& tracing_data = {},
                            const std::vector<std::byte>& build_ids = {},
                            const CompressionFeature* compression = nullptr);

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
};
// GNU build-id of an ELF file (NT_GNU_BUILD_ID in a PT_NOTE), or of the running kernel.
std::optional<std::vector<uint8_t>> read_build_id(const std::string& path);
std::optional<std::vector<uint8_t>> kernel_build_id();
// The HEADER_BUILD_ID payload.
std::vector<std::byte> build_build_id_feature(const std::vector<BuildIdEntry>& entries);

// The HEADER_TRACING_DATA payload for these (system, event) tracepoints, read from tracefs.
std::vector<std::byte> build_tracing_data(const std::string& tracefs,
                                          const std::vector<std::pair<std::string, std::string>>& tracepoints);

}  // namespace ringcap
