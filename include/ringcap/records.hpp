// perf record layouts: the one place that knows where a field sits in a record. The ring reader, the
// /proc synthesis, the records ringcap writes itself and the test kit's reader all take them from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <linux/perf_event.h>
#include <vector>

namespace ringcap {

// Record types of perf's own (tools/perf/util/event.h), not in the kernel's uapi header.
inline constexpr uint32_t kRecordHeaderAttr = 64;         // PERF_RECORD_HEADER_ATTR (pipe mode)
inline constexpr uint32_t kRecordHeaderTracingData = 66;  // PERF_RECORD_HEADER_TRACING_DATA (pipe mode)
inline constexpr uint32_t kRecordHeaderFeature = 80;      // PERF_RECORD_HEADER_FEATURE (pipe mode)
inline constexpr uint32_t kRecordHeaderBuildId = 67;  // PERF_RECORD_HEADER_BUILD_ID
inline constexpr uint32_t kRecordFinishedRound = 68;  // PERF_RECORD_FINISHED_ROUND: header only
inline constexpr uint32_t kRecordIdIndex = 69;        // PERF_RECORD_ID_INDEX
inline constexpr uint32_t kRecordThreadMap = 73;      // PERF_RECORD_THREAD_MAP
inline constexpr uint32_t kRecordCpuMap = 74;         // PERF_RECORD_CPU_MAP
// PERF_RECORD_FINISHED_INIT, which perf report and perf script ignore whatever its size: ringcap pads
// buffers with it (a FINISHED_ROUND used as padding would act as a round marker).
inline constexpr uint32_t kRecordPadding = 82;
inline constexpr uint32_t kRecordFinishedInit = 82;  // header only, after the synthesized start records
inline constexpr uint32_t kRecordCompressed = 81;  // PERF_RECORD_COMPRESSED: zstd bytes after the header (-z)
inline constexpr size_t kMaxRecordBytes = 65528;  // header.size is a u16; records are 8-byte aligned
inline constexpr uint16_t kMiscBuildIdSize = 1u << 15;  // PERF_RECORD_MISC_BUILD_ID_SIZE

// Bodies: what follows the perf_event_header. Variable parts (names) and sample_id come after them.
struct MmapBody {  // PERF_RECORD_MMAP, then char filename[]
    uint32_t pid, tid;
    uint64_t addr, len, pgoff;
};
struct Mmap2Body {  // PERF_RECORD_MMAP2, then char filename[]
    uint32_t pid, tid;
    uint64_t addr, len, pgoff;
    uint32_t maj, min;
    uint64_t ino, ino_generation;
    uint32_t prot, flags;
};
struct CommBody {  // PERF_RECORD_COMM, then char comm[]
    uint32_t pid, tid;
};
struct ForkBody {  // PERF_RECORD_FORK / PERF_RECORD_EXIT
    uint32_t pid, ppid, tid, ptid;
    uint64_t time;
};
// PERF_RECORD_MISC_FORK_EXEC, which perf sets on the FORK records it synthesizes.
inline constexpr uint16_t kMiscForkExec = 1u << 13;
struct LostBody {  // PERF_RECORD_LOST
    uint64_t id, lost;
};
struct BuildIdBody {  // PERF_RECORD_HEADER_BUILD_ID (feature section), then the name padded to 64
    int32_t pid;
    uint8_t build_id[20];
    uint8_t size;  // bytes of build_id used (with kMiscBuildIdSize in misc)
    uint8_t reserved[3];
};
static_assert(sizeof(ForkBody) == 24 && sizeof(MmapBody) == 32 && sizeof(Mmap2Body) == 64 && sizeof(LostBody) == 16 && sizeof(BuildIdBody) == 28);

// Byte offsets of fields from the start of a record.
namespace field {
inline constexpr size_t kBody = sizeof(perf_event_header);
inline constexpr size_t kMmapFilename = kBody + sizeof(MmapBody);
inline constexpr size_t kMmap2Filename = kBody + sizeof(Mmap2Body);
inline constexpr size_t kMmap2Prot = kBody + offsetof(Mmap2Body, prot);
inline constexpr size_t kLostId = kBody + offsetof(LostBody, id);
inline constexpr size_t kLostCount = kBody + offsetof(LostBody, lost);
// PERF_SAMPLE_IDENTIFIER (in every attr ringcap opens) puts the event id first in every sample.
inline constexpr size_t kSampleIdentifier = kBody;
// Then IP, PID/TID and TIME (kDefaultSampleType's order; every attr ringcap opens has them).
inline constexpr size_t kSampleIp = kBody + sizeof(uint64_t);
inline constexpr size_t kSamplePid = kBody + 2 * sizeof(uint64_t);
inline constexpr size_t kSampleTime = kBody + 3 * sizeof(uint64_t);
// Then CPU and PERIOD (kDefaultSampleType has no ADDR, ID or STREAM_ID, which would come between).
inline constexpr size_t kSamplePeriod = kBody + 5 * sizeof(uint64_t);
// PERF_RECORD_LOST_SAMPLES: { header; u64 lost; sample_id }
inline constexpr size_t kLostSamplesCount = kBody;
}  // namespace field

// Bytes of sample_id that follow every non-sample record when sample_id_all is set.
constexpr size_t sample_id_size(uint64_t t) {
    size_t n = 0;
    for (uint64_t bit : {PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_ID, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU,
                         PERF_SAMPLE_IDENTIFIER})
        if (t & bit) n += 8;
    return n;
}

// PERF_RECORD_LOST_SAMPLES as perf record writes it at the end, with the sample_id of the default
// sample_type (TID, TIME, CPU, IDENTIFIER).
struct LostSamplesRecord {
    perf_event_header header;
    uint64_t lost;
    uint32_t pid, tid;
    uint64_t time;
    uint32_t cpu, res;
    uint64_t id;  // IDENTIFIER
};
static_assert(sizeof(LostSamplesRecord) == 48);
LostSamplesRecord make_lost_samples(uint64_t id, int cpu, uint64_t lost);

// Appends `n` bytes (a multiple of 8) of padding records to `out`.
void append_padding(std::vector<std::byte>& out, size_t n);

inline perf_event_header finished_round_record() {
    return perf_event_header{kRecordFinishedRound, 0, sizeof(perf_event_header)};
}

// Records of `type` among the whole records in [p, p + len) (a staging buffer's; padding included).
inline uint64_t count_records(const std::byte* p, size_t len, uint32_t type) {
    uint64_t n = 0;
    for (size_t pos = 0; pos + sizeof(perf_event_header) <= len;) {
        perf_event_header h;
        std::memcpy(&h, p + pos, sizeof h);
        if (h.size < sizeof h) break;
        n += h.type == type;
        pos += h.size;
    }
    return n;
}

}  // namespace ringcap
