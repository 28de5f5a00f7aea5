// Record layouts: the offsets ringcap reads and writes are the kernel's (include/uapi/linux/perf_event.h).
#include <catch2/catch.hpp>

#include "ringcap/records.hpp"

using namespace ringcap;

TEST_CASE("record field offsets match the kernel's record layouts", "[format]") {
    // MMAP: header, pid, tid, addr, len, pgoff, filename.
    CHECK(field::kMmapFilename == 40);
    // MMAP2: ... pgoff, maj, min, ino, ino_generation, prot, flags, filename.
    CHECK(field::kMmap2Prot == 64);
    CHECK(field::kMmap2Filename == 72);
    // LOST: header, id, lost.
    CHECK(field::kLostId == 8);
    CHECK(field::kLostCount == 16);
    // With PERF_SAMPLE_IDENTIFIER the id is the sample's first u64.
    CHECK(field::kSampleIdentifier == 8);
    // sample_id of the default sample_type: TID, TIME, CPU, IDENTIFIER.
    CHECK(sample_id_size(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                         PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD) == 32);
    const LostSamplesRecord r = make_lost_samples(42, 3, 7);
    CHECK(r.header.type == PERF_RECORD_LOST_SAMPLES);
    CHECK(r.header.size == 8 + 8 + 32);
    CHECK(r.lost == 7);
    CHECK(r.id == 42);
}
