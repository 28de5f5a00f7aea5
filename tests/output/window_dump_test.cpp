// The flight recorder's dump helpers (window_dump.hpp): the window copied out of memory, and a data
// section's records counted, COMPRESSED ones decompressed as perf reads them.
#include <catch2/catch.hpp>

#include <cstring>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "ringcap/encoder.hpp"
#include "ringcap/records.hpp"
#include "ringcap/sys.hpp"
#include "ringcap/window_dump.hpp"
#include "tools.hpp"

using namespace ringcap;

namespace {

// `n` records of `size` bytes each, every `every`th a COMM (the rest samples).
std::vector<std::byte> records(size_t n, size_t size, size_t every) {
    std::vector<std::byte> b(n * size);
    for (size_t i = 0; i < n; ++i) {
        const perf_event_header h{uint32_t(i % every == 0 ? PERF_RECORD_COMM : PERF_RECORD_SAMPLE), 0, uint16_t(size)};
        std::memcpy(b.data() + i * size, &h, sizeof h);
        for (size_t k = sizeof h; k < size; ++k) b[i * size + k] = std::byte(i * 7 + k);
    }
    return b;
}

}  // namespace

TEST_CASE("dump: records are counted in plain and COMPRESSED data, a record cut short is noticed", "[window]") {
    TempFile f("dump-count");
    UniqueFd fd(::open(f.path.c_str(), O_RDWR | O_TRUNC | O_CLOEXEC));
    REQUIRE(fd);
    // Plain records, then three frames (one staging buffer each, as the encoder makes them), then plain again.
    const auto plain = records(100, 64, 10);  // 10 COMM, 90 samples
    std::vector<std::byte> data = plain;
    const size_t buffer = 1u << 20;
    ZstdEncoder enc(1, buffer);
    std::vector<std::byte> area(ZstdEncoder::records_area(buffer));
    const auto frame_in = records(buffer / 1024, 1024, 4);  // 1024 records: 256 COMM, 768 samples
    for (int i = 0; i < 3; ++i) {
        const auto recs = enc.compress(frame_in, area.data());
        data.insert(data.end(), recs.begin(), recs.end());
    }
    data.insert(data.end(), plain.begin(), plain.end());
    const uint64_t at = 4096;
    REQUIRE(::pwrite(fd.get(), data.data(), data.size(), at) == ssize_t(data.size()));

    const RecordCount c = count_records(fd.get(), at, data.size());
    CHECK(c.ok);
    CHECK(c.samples == 2 * 90 + 3 * 768);
    CHECK(c.records == 2 * 100 + 3 * 1024);
    // Cut inside the last plain record: the whole ones are counted and the cut one is noticed.
    const RecordCount cut = count_records(fd.get(), at, data.size() - 8);
    CHECK_FALSE(cut.ok);
    CHECK(cut.samples == 2 * 90 + 3 * 768 - 1);
}

TEST_CASE("dump: the window's bytes are copied from memory at the offsets asked", "[window]") {
    UniqueFd mem(::memfd_create("window-test", MFD_CLOEXEC));
    REQUIRE(mem);
    std::vector<std::byte> src(3u << 20);
    for (size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i * 131 + 7);
    REQUIRE(::pwrite(mem.get(), src.data(), src.size(), 0) == ssize_t(src.size()));
    TempFile f("dump-copy");
    UniqueFd out(::open(f.path.c_str(), O_RDWR | O_TRUNC | O_CLOEXEC));
    REQUIRE(out);
    REQUIRE(copy_range(mem.get(), 4096, out.get(), 8192, src.size() - 4096) == 0);
    std::vector<std::byte> back(src.size() - 4096);
    REQUIRE(::pread(out.get(), back.data(), back.size(), 8192) == ssize_t(back.size()));
    CHECK(std::memcmp(back.data(), src.data() + 4096, back.size()) == 0);
    // Past the end of what memory holds: an error, not a short file that looks whole.
    CHECK(copy_range(mem.get(), src.size() - 10, out.get(), 0, 100) != 0);
}
