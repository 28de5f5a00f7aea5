// Writer faults: short writes, EAGAIN/EINTR, EIO. Injected through Writer::set_fault on top of the
// kernel's real result (io_uring SQEs, or pwrite on the epoll backend), so every case is
// deterministic; the file is read back byte for byte.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fcntl.h>
#include <memory>
#include <set>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "ringcap/dir.hpp"
#include "ringcap/loop.hpp"
#include "ringcap/writer.hpp"
#include "tools.hpp"
#include "writer_rig.hpp"

using namespace writer_rig;

TEST_CASE("Writer resubmits the rest of a short write", "[writer]") {
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    Rig r(be, kBuf, 8);
    // Shorten the first completion of each buffer (by start offset) to `cut` bytes; record every call
    // to check what the seam is told.
    uint32_t cut = 0;
    uint64_t expect_direct = 0, expect_writes = 0, expect_shorts = 0;
    const uint64_t total = 6 * kBuf + 5000;
    const bool direct = r.file.o_direct();
    SECTION("unaligned remainder") {
        cut = 1000;  // remainders start mid-page: they must go through the buffered fd
        expect_shorts = 7;  // 6 full + the partial
        expect_writes = 14;
        expect_direct = direct ? 6 : 0;
    }
    SECTION("aligned remainder") {
        cut = 3 * 4096;  // remainders stay aligned: O_DIRECT again; the 5000-byte partial is not cut
        expect_shorts = 6;
        expect_writes = 13;
        expect_direct = direct ? 12 : 0;
    }
    struct Call {
        uint64_t off;
        uint32_t len;
    };
    std::vector<Call> calls;
    std::set<uint64_t> cut_done;
    r.writer.set_fault([&](uint64_t off, uint32_t len, int res) {
        calls.push_back({off, len});
        if (res > int(cut) && r.is_buffer_start(off, kBuf) && cut_done.insert(off).second) return int(cut);
        return res;
    });

    REQUIRE(r.fill(total) == total);
    r.writer.queue_ready();
    r.writer.queue_partial();
    r.writer.wait_idle();

    const WriterStats& st = r.writer.stats();
    CHECK_FALSE(r.writer.failed());
    CHECK(st.short_writes == expect_shorts);
    CHECK(st.writes == expect_writes);
    CHECK(st.direct_writes == expect_direct);
    CHECK(st.retries == 0);
    CHECK(st.bytes == total);
    CHECK(r.writer.bytes_kept() == total);
    CHECK(r.pool.free_count() == r.pool.count());

    // The remainder of the buffer at 0 is reported as (start + cut, len - cut).
    bool saw_rest = false;
    for (const auto& c : calls) saw_rest |= c.off == kDataOffset + cut && c.len == kBuf - cut;
    CHECK(saw_rest);

    CHECK(file_size(r.tmp.path) == kDataOffset + total);
    CHECK(first_mismatch(r.tmp.path, kDataOffset, total) == -1);
}

TEST_CASE("Writer retries a write that completed with EAGAIN or EINTR", "[writer]") {
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    Rig r(be, kBuf, 8);
    int transient = 0;
    SECTION("EAGAIN") { transient = -EAGAIN; }
    SECTION("EINTR") { transient = -EINTR; }
    // Buffers 1, 3 and 5 fail transiently twice, then succeed.
    std::vector<int> hits(8, 0);
    r.writer.set_fault([&](uint64_t off, uint32_t, int res) {
        const uint64_t k = (off - kDataOffset) / kBuf;
        if (k % 2 == 1 && hits[k]++ < 2) return transient;
        return res;
    });

    REQUIRE(r.fill(6 * kBuf) == 6 * kBuf);
    r.writer.queue_ready();
    r.writer.wait_idle();

    const WriterStats& st = r.writer.stats();
    CHECK_FALSE(r.writer.failed());
    CHECK(st.retries == 6);
    CHECK(st.writes == 12);
    CHECK(st.short_writes == 0);
    CHECK(st.bytes == 6 * kBuf);
    CHECK(r.pool.free_count() == r.pool.count());
    CHECK(first_mismatch(r.tmp.path, kDataOffset, 6 * kBuf) == -1);
}

TEST_CASE("Writer gives up on a write that keeps failing with EAGAIN", "[writer]") {
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    // Smallest buffers so the ~1000 retries stay cheap; buffered fd keeps them in the page cache.
    constexpr size_t bs = ringcap::kMinBufferBytes;
    Rig r(be, bs, 32, false);
    r.writer.set_fault([&](uint64_t off, uint32_t, int res) { return off == kDataOffset + bs ? -EAGAIN : res; });

    REQUIRE(r.fill(3 * bs) == 3 * bs);
    r.writer.queue_ready();
    r.writer.wait_idle();

    CHECK(r.writer.failed());
    CHECK(r.writer.error() == EAGAIN);
    CHECK(r.writer.stats().retries == 1000);  // the bound, then an error rather than a spin
    CHECK(r.writer.bytes_kept() == bs);
    CHECK(r.pool.free_count() == r.pool.count());
}

TEST_CASE("Writer stops at an I/O error and keeps everything before it", "[writer]") {
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    Rig r(be, kBuf, 8);
    const uint64_t bad = kDataOffset + 2 * kBuf;  // the 3rd buffer

    SECTION("EIO while later writes are in flight") {
        r.writer.set_fault([&](uint64_t off, uint32_t, int res) { return off == bad ? -EIO : res; });
        REQUIRE(r.fill(6 * kBuf) == 6 * kBuf);
        r.writer.queue_ready();
        r.writer.wait_idle();  // must return although a write failed

        CHECK(r.writer.failed());
        CHECK(r.writer.error() == EIO);
        CHECK(r.writer.bytes_kept() == bad - kDataOffset);
        CHECK(r.writer.stats().bytes == 5 * kBuf);  // the others were already submitted and completed
        CHECK(r.writer.in_flight() == 0);
        CHECK(r.pool.free_count() == r.pool.count());
        CHECK(first_mismatch(r.tmp.path, kDataOffset, r.writer.bytes_kept()) == -1);
    }

    SECTION("EIO, then buffers queued afterwards are dropped, not written") {
        r.writer.set_fault([&](uint64_t off, uint32_t, int res) { return off == bad ? -EIO : res; });
        REQUIRE(r.fill(3 * kBuf) == 3 * kBuf);
        r.writer.queue_ready();
        r.writer.wait_idle();
        REQUIRE(r.writer.failed());
        const uint64_t size_at_error = file_size(r.tmp.path);
        const WriterStats before = r.writer.stats();

        REQUIRE(r.fill(3 * kBuf + 777) == 3 * kBuf + 777);
        r.writer.queue_ready();
        r.writer.queue_partial();
        CHECK(r.writer.in_flight() == 0);  // completed (as cancelled) on the spot
        r.writer.wait_idle();

        CHECK(r.writer.error() == EIO);
        CHECK(r.writer.stats().writes == before.writes);  // no SQE for them
        CHECK(r.writer.stats().bytes == before.bytes);
        CHECK(r.writer.bytes_queued() == 6 * kBuf + 777);
        CHECK(r.writer.bytes_kept() == bad - kDataOffset);
        CHECK(r.pool.free_count() == r.pool.count());
        CHECK(file_size(r.tmp.path) == size_at_error);
        CHECK(first_mismatch(r.tmp.path, kDataOffset, r.writer.bytes_kept()) == -1);
    }

    SECTION("EIO on the remainder of a short write keeps the part that was written") {
        r.writer.set_fault([&](uint64_t off, uint32_t, int res) {
            if (off == bad) return 1000;
            if (off == bad + 1000) return -EIO;
            return res;
        });
        REQUIRE(r.fill(4 * kBuf) == 4 * kBuf);
        r.writer.queue_ready();
        r.writer.wait_idle();

        CHECK(r.writer.error() == EIO);
        CHECK(r.writer.stats().short_writes == 1);
        CHECK(r.writer.bytes_kept() == bad + 1000 - kDataOffset);
        CHECK(r.pool.free_count() == r.pool.count());
        CHECK(first_mismatch(r.tmp.path, kDataOffset, r.writer.bytes_kept()) == -1);
    }

    SECTION("a zero-byte completion is an error (ENOSPC), not a spin") {
        r.writer.set_fault([&](uint64_t off, uint32_t, int res) { return off == bad ? 0 : res; });
        REQUIRE(r.fill(4 * kBuf) == 4 * kBuf);
        r.writer.queue_ready();
        r.writer.wait_idle();

        CHECK(r.writer.error() == ENOSPC);
        CHECK(r.writer.bytes_kept() == bad - kDataOffset);
        CHECK(r.writer.stats().writes == 4);
        CHECK(r.pool.free_count() == r.pool.count());
    }
}
