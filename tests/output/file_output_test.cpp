// FileOutput on its own: what it reads back of its data section after a failed write.
#include <catch2/catch.hpp>

#include <cstring>
#include <linux/perf_event.h>
#include <random>
#include <vector>

#include "ringcap/encoder.hpp"
#include "ringcap/file_output.hpp"
#include "ringcap/records.hpp"
#include "tools.hpp"

using namespace ringcap;

namespace {

// Sample records of `n` bytes with random contents (what zstd cannot shrink), filling `bytes`.
std::vector<std::byte> random_samples(size_t bytes, size_t n) {
    std::vector<std::byte> b(bytes / n * n);
    std::mt19937 rng(7);
    for (size_t at = 0; at < b.size(); at += n) {
        const perf_event_header h{PERF_RECORD_SAMPLE, 0, uint16_t(n)};
        std::memcpy(b.data() + at, &h, sizeof h);
        for (size_t i = sizeof h; i < n; ++i) b[at + i] = std::byte(rng());
    }
    return b;
}

}  // namespace

TEST_CASE("after a failed write the kept data ends at the last whole record, COMPRESSED records of any size included",
          "[record][compress]") {
    // -z: a zstd frame is cut into records at block boundaries; only the frame's records as a whole
    // end 8-byte aligned (encoder.hpp), each one alone mostly does not.
    const size_t buffer = 1u << 20;
    ZstdEncoder enc(1, buffer);
    std::vector<std::byte> area(ZstdEncoder::records_area(buffer));
    const auto in = random_samples(buffer, 8240);
    const auto recs = enc.compress(in, area.data());
    std::vector<uint64_t> ends;  // of each record, from the data's start
    for (uint64_t at = 0; at < recs.size();) {
        perf_event_header h;
        std::memcpy(&h, recs.data() + at, sizeof h);
        REQUIRE(h.type == kRecordCompressed);
        at += h.size;
        ends.push_back(at);
    }
    REQUIRE(ends.back() == recs.size());
    REQUIRE(ends.size() >= 4);
    REQUIRE(ends[0] % 8 != 0);  // what the test is about: a record size the old walk refused

    TempDir dir("file-output");
    std::vector<AttrEntry> attrs(1);
    attrs[0].ids = {1};
    FileOutput out(dir.path + "/perf.data", false, attrs);
    out.file().pwrite_all(recs.data(), recs.size(), out.data_offset());
    CHECK(out.last_record_end(0, recs.size()) == recs.size());
    // The disk took part of a record: the record before it is the last kept, from the data's start
    // (a rotated file) or from a record boundary (the failed buffer's start).
    for (size_t i = 1; i < ends.size(); ++i) {
        INFO("cut in record " << i);
        CHECK(out.last_record_end(0, ends[i] - 1) == ends[i - 1]);
        CHECK(out.last_record_end(ends[0], ends[i] - 1) == ends[i - 1]);
    }
    CHECK(out.last_record_end(0, ends[0] - 1) == 0);
    // Records of other types still have the kernel's 8-byte sizes: garbage stops the walk.
    const perf_event_header odd{PERF_RECORD_SAMPLE, 0, 13};
    out.file().pwrite_all(&odd, sizeof odd, out.data_offset() + recs.size());
    CHECK(out.last_record_end(0, recs.size() + 64) == recs.size());
}
