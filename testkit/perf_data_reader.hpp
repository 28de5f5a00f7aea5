// Test kit (tests and bench only, not in the product): a minimal reader of perf.data files (file
// mode): header, attrs with ids, event names from EVENT_DESC, and a walk over the data section
// (decompressing COMPRESSED records with libzstd). The
// tests use it to count what a file holds independently of the recorder's counters.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ringcap/perf_data.hpp"

namespace ringcap {

struct FileCounts {
    uint64_t records = 0;
    uint64_t samples = 0;
    uint64_t lost_records = 0;
    uint64_t lost = 0;            // sum of PERF_RECORD_LOST.lost
    uint64_t lost_samples = 0;    // sum of PERF_RECORD_LOST_SAMPLES.lost
    uint64_t finished_rounds = 0;
    std::map<uint32_t, uint64_t> by_type;
    std::vector<uint64_t> samples_per_attr;  // index = attr order in the file
    std::map<uint64_t, uint64_t> samples_per_id;
    uint64_t unknown_ids = 0;     // samples whose id matches no attr
    bool truncated = false;       // the data section ends inside a record
    // -z: COMPRESSED records (their records are counted above as well), what they decompressed to,
    // errors (including records that decompress to nothing, which perf 6.1 rejects), and bytes left
    // over at the end that are not a whole record.
    uint64_t compressed_records = 0;
    uint64_t decompressed_bytes = 0;
    uint64_t decompress_errors = 0;
    uint64_t compressed_leftover = 0;
};

struct PerfDataFile {
    PerfFileHeader header{};
    std::vector<AttrEntry> attrs;  // names filled from EVENT_DESC when present
    FileCounts counts;
};

// Reads and walks `path`. Returns nullopt and sets *error if it is not a readable perf.data file.
std::optional<PerfDataFile> read_perf_data(const std::string& path, std::string* error);

}  // namespace ringcap
