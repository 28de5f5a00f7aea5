// FileOutput on its own: what it reads back of its data section after a failed write, and the order
// in which it makes data and header durable.
#include <catch2/catch.hpp>

#include <cerrno>
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

// The data size of the header on disk now.
uint64_t header_data_size(const FileOutput& out) {
    PerfFileHeader h{};
    REQUIRE(out.file().pread_some(&h, sizeof h, 0) == sizeof h);
    return h.data.size;
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

TEST_CASE("a header refresh syncs the data before it writes the header, the end syncs after the final header",
          "[record]") {
    // Power loss: a header on stable storage must name only data that is there too, so each refresh
    // syncs first. The seam sees the header on disk at each sync.
    TempDir dir("file-output-sync");
    std::vector<AttrEntry> attrs(1);
    attrs[0].ids = {1};
    const auto data = random_samples(8192, 64);
    std::vector<uint64_t> header_at_sync;
    {
        FileOutput out(dir.path + "/perf.data", false, attrs);
        out.set_sync([&](int fd) {
            header_at_sync.push_back(header_data_size(out));
            return ::fdatasync(fd);
        });
        out.file().pwrite_all(data.data(), data.size(), out.data_offset());
        out.refresh_header(data.size());  // never published: not held back by the 250 ms interval
        CHECK(header_at_sync == std::vector<uint64_t>{0});  // synced while the header still said 0
        CHECK(header_data_size(out) == data.size());
        CHECK(out.header_covers() == data.size());
        header_at_sync.clear();
        CHECK(out.finish(data.size(), HostInfo{}, {}, nullptr).empty());
        CHECK(header_at_sync == std::vector<uint64_t>{data.size()});  // synced with the final header on disk
    }
    // A sync that fails leaves the header as it was: it never names data that may not be on disk.
    FileOutput out(dir.path + "/perf2.data", false, attrs);
    out.set_sync([](int) {
        errno = EIO;
        return -1;
    });
    out.file().pwrite_all(data.data(), data.size(), out.data_offset());
    out.refresh_header(data.size());
    CHECK(header_data_size(out) == 0);
    CHECK(out.header_covers() == 0);
}
