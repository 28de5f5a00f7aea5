// Writer tests: real writes (io_uring SQEs, or pwrite on the epoll backend) to a temp file, checked
// by reading the file back byte for byte: offsets, the partial buffer, buffer reuse, the durable
// size, O_DIRECT. Faults are in writer_error_test.cpp and writer_fault_test.cpp, allocation, switches
// and size limits in writer_space_test.cpp.
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

TEST_CASE("Writer issues all ready buffers before one enter, at consecutive offsets", "[writer]") {
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    Rig r(be, kBuf, 8);
    REQUIRE(r.fill(6 * kBuf) == 6 * kBuf);

    const LoopStats l0 = r.loop->stats();
    r.writer.queue_ready();
    // queue_ready issues all six writes (SQEs on io_uring: 6 < SQ 16, so no early submit) without
    // entering the kernel's wait: they go out together with the next enter.
    CHECK(r.loop->stats().writes - l0.writes == 6);
    CHECK(r.loop->stats().waits == l0.waits);
    CHECK(r.writer.in_flight() == 6);
    CHECK(r.pool.free_count() == 2);

    // One enter submits the whole batch; nothing is issued after it.
    r.pump();
    CHECK(r.loop->stats().waits - l0.waits == 1);
    CHECK(r.writer.in_flight() < 6);  // at least one completion came back from that enter
    r.writer.wait_idle();
    CHECK(r.loop->stats().writes - l0.writes == 6);  // nothing was resubmitted
    CHECK(r.other_events == 0);
    CHECK(r.writer.in_flight() == 0);
    CHECK_FALSE(r.writer.failed());

    const WriterStats& st = r.writer.stats();
    CHECK(st.writes == 6);
    CHECK(st.bytes == 6 * kBuf);
    CHECK(st.short_writes == 0);
    CHECK(st.retries == 0);
    CHECK(r.writer.bytes_queued() == 6 * kBuf);
    CHECK(r.writer.bytes_kept() == 6 * kBuf);
    CHECK(r.pool.free_count() == r.pool.count());  // every buffer came back

    CHECK(file_size(r.tmp.path) == kDataOffset + 6 * kBuf);
    CHECK(first_mismatch(r.tmp.path, kDataOffset, 6 * kBuf) == -1);
}

TEST_CASE("Writer writes the final partial buffer exactly", "[writer]") {
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    Rig r(be, kBuf, 4);
    uint64_t total = 0;
    bool ready_first = true;
    SECTION("after full buffers") { total = 2 * kBuf + 10007; }
    SECTION("a single byte only") { total = 1; }
    SECTION("an aligned partial") { total = kBuf + 3 * 4096; }
    SECTION("queue_partial alone still puts the full buffers first") {
        total = 2 * kBuf + 10007;
        ready_first = false;
    }
    REQUIRE(r.fill(total) == total);

    if (ready_first) r.writer.queue_ready();
    r.writer.queue_partial();
    r.writer.wait_idle();
    const uint64_t writes = r.writer.stats().writes;
    CHECK(writes == (total + kBuf - 1) / kBuf);

    // Nothing left to queue: a second call is a no-op.
    r.writer.queue_partial();
    CHECK(r.writer.in_flight() == 0);
    CHECK(r.writer.stats().writes == writes);

    CHECK_FALSE(r.writer.failed());
    CHECK(r.writer.bytes_queued() == total);
    CHECK(r.writer.bytes_kept() == total);
    CHECK(r.writer.stats().bytes == total);
    CHECK(r.pool.free_count() == r.pool.count());
    CHECK(file_size(r.tmp.path) == kDataOffset + total);  // no padding past the data
    CHECK(first_mismatch(r.tmp.path, kDataOffset, total) == -1);
}

TEST_CASE("Writer recycles a small pool across many MiB", "[writer]") {
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    constexpr size_t count = 2;  // 2 x 64 KiB: the minimum pool
    constexpr uint64_t target = 16u << 20;
    Rig r(be, kBuf, count);
    const uint64_t tail = 4321;  // final partial buffer
    std::set<uint64_t> faulted;  // outlives the section: the fault stays installed for the tail below

    SECTION("fill, queue, wait idle, repeat") {
        uint64_t rounds = 0;
        while (r.pos < target) {
            // Odd-sized commits so buffer boundaries fall inside commits' natural sizes.
            const uint64_t n = r.fill(target - r.pos, 7777);
            REQUIRE(n > 0);
            REQUIRE(r.pool.writable().empty());
            r.writer.queue_ready();
            r.writer.wait_idle();
            REQUIRE_FALSE(r.writer.failed());
            REQUIRE(r.pool.free_count() == count);
            ++rounds;
        }
        CHECK(rounds == target / (count * kBuf));
    }

    SECTION("pipelined: refill as soon as any write completes, with faults sprinkled") {
        // Every 3rd buffer short-writes once, every 5th sees EAGAIN once.
        r.writer.set_fault([&](uint64_t off, uint32_t, int res) {
            if (!r.is_buffer_start(off, kBuf) || !faulted.insert(off).second) return res;
            const uint64_t k = (off - kDataOffset) / kBuf;
            if (k % 3 == 0) return std::min(res, 1000);
            if (k % 5 == 0) return -EAGAIN;
            return res;
        });
        while (r.pos < target) {
            r.fill(target - r.pos, 7777);
            r.writer.queue_ready();
            if (r.writer.in_flight() > 0) r.pump();
            REQUIRE_FALSE(r.writer.failed());
        }
        r.writer.wait_idle();
        CHECK(r.writer.stats().short_writes > 0);
        CHECK(r.writer.stats().retries > 0);
    }

    REQUIRE(r.fill(tail) == tail);
    r.writer.queue_partial();
    r.writer.wait_idle();

    const uint64_t total = target + tail;
    CHECK_FALSE(r.writer.failed());
    CHECK(r.writer.bytes_queued() == total);
    CHECK(r.writer.stats().bytes == total);
    CHECK(r.pool.free_count() == count);
    CHECK(r.other_events == 0);
    CHECK(file_size(r.tmp.path) == kDataOffset + total);
    CHECK(first_mismatch(r.tmp.path, kDataOffset, total) == -1);
}

TEST_CASE("Writer's durable size is the end of the buffers wholly on disk", "[writer]") {
    // Buffers hold whole records, so every buffer end is a record boundary: the durable size is the
    // start of the first buffer still owed.
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    Rig r(be, kBuf, 8);
    const uint64_t total = 3 * kBuf + 5000;
    REQUIRE(r.fill(total) == total);
    CHECK(r.writer.durable_size() == 0);  // nothing written yet
    CHECK(r.writer.owed() == UINT64_MAX);

    SECTION("all writes succeed") {
        r.writer.queue_ready();
        CHECK(r.writer.owed() == kDataOffset);  // issued is not on disk
        CHECK(r.writer.durable_size() == 0);
        r.writer.wait_idle();
        CHECK(r.writer.durable_size() == 3 * kBuf);
        r.writer.queue_partial();
        r.writer.wait_idle();
        CHECK(r.writer.durable_size() == total);
    }
    SECTION("EIO on the 2nd buffer: the durable size stops before it") {
        r.writer.set_fault([&](uint64_t off, uint32_t, int res) { return off == kDataOffset + kBuf ? -EIO : res; });
        r.writer.queue_ready();
        r.writer.queue_partial();
        r.writer.wait_idle();
        REQUIRE(r.writer.error() == EIO);
        CHECK(r.writer.bytes_kept() == kBuf);
        CHECK(r.writer.durable_size() == kBuf);
    }
    SECTION("EIO after a short write: the part that got through is kept, the durable size is before it") {
        r.writer.set_fault([&](uint64_t off, uint32_t, int res) {
            if (off == kDataOffset) return 1000;
            if (off == kDataOffset + 1000) return -EIO;
            return res;
        });
        r.writer.queue_ready();
        r.writer.wait_idle();
        REQUIRE(r.writer.error() == EIO);
        CHECK(r.writer.bytes_kept() == 1000);  // the recorder reads back the records in it
        CHECK(r.writer.durable_size() == 0);
    }
}

// Regression: a buffer goes back to the pool as soon as its own write completes, even while an
// earlier write is still in flight, so the on-disk prefix must not be tracked by queue slots that
// get reused. Deterministic on the epoll backend: completions come back in issue order, and the
// fault seam holds back the first write with one EAGAIN.
TEST_CASE("Writer's durable size never covers a write that is not on disk", "[writer]") {
    Rig r(Backend::Epoll, kBuf, 2);
    const uint64_t a = kDataOffset, c = kDataOffset + 2 * kBuf;
    int c_result = 0;
    SECTION("third write fails with EIO") { c_result = -EIO; }
    SECTION("third write still in flight") { c_result = -EAGAIN; }
    bool a_held = false, c_done = false;
    r.writer.set_fault([&](uint64_t off, uint32_t, int res) {
        if (off == a && !a_held) return a_held = true, -EAGAIN;
        if (off == c && !c_done) return c_done = true, c_result;
        return res;
    });

    REQUIRE(r.fill(2 * kBuf) == 2 * kBuf);  // A (seq 0), B (seq 1)
    r.writer.queue_ready();
    r.pump();  // A: EAGAIN, resubmitted; B: done, its buffer is free again
    REQUIRE(r.writer.in_flight() == 1);
    REQUIRE(r.writer.durable_size() == 0);  // A is not on disk
    REQUIRE(r.fill(kBuf) == kBuf);  // C (seq 2) reuses B's buffer; its order_ entry is A's
    r.writer.queue_ready();
    r.pump();  // A: done; C: EIO or EAGAIN
    if (c_result == -EIO) {
        REQUIRE(r.writer.failed());
        CHECK(r.writer.bytes_kept() == 2 * kBuf);
    } else {
        REQUIRE(r.writer.in_flight() == 1);  // C resubmitted, not on disk
    }
    CHECK(r.writer.durable_size() <= 2 * kBuf);  // fails: 3 * kBuf
    r.writer.wait_idle();
    // Where it matters most: after the failure this is the data size the recorder keeps at stop.
    if (c_result == -EIO) CHECK(r.writer.durable_size() <= r.writer.bytes_kept());  // fails too
}

// Last in the file: skip_test() ends the process, which would cut short any test after it when the
// binary is run directly (ctest runs each case on its own).
TEST_CASE("Writer uses O_DIRECT for full aligned buffers, without it the file is identical", "[writer]") {
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    const uint64_t total = 5 * kBuf + 3000;
    auto write_all = [&](Rig& r) {
        REQUIRE(r.fill(total) == total);
        r.writer.queue_ready();
        r.writer.queue_partial();
        r.writer.wait_idle();
        REQUIRE_FALSE(r.writer.failed());
    };

    Rig d(be, kBuf, 8, true);
    if (!d.file.o_direct()) skip_test("the filesystem of " + d.tmp.path + " refuses O_DIRECT");
    write_all(d);
    CHECK(d.writer.stats().writes == 6);
    CHECK(d.writer.stats().direct_writes == 5);  // the unaligned last piece goes through the page cache

    Rig b(be, kBuf, 8, false);
    CHECK_FALSE(b.file.o_direct());
    CHECK(b.file.direct_fd() == b.file.buffered_fd());
    write_all(b);
    CHECK(b.writer.stats().writes == 6);
    CHECK(b.writer.stats().direct_writes == 0);

    // Same bytes either way.
    REQUIRE(file_size(d.tmp.path) == kDataOffset + total);
    REQUIRE(file_size(b.tmp.path) == kDataOffset + total);
    CHECK(first_mismatch(d.tmp.path, kDataOffset, total) == -1);
    CHECK(first_mismatch(b.tmp.path, kDataOffset, total) == -1);
    UniqueFd fd(::open(d.tmp.path.c_str(), O_RDONLY | O_CLOEXEC)), fb(::open(b.tmp.path.c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(fd);
    REQUIRE(fb);
    std::vector<char> x(kDataOffset + total), y(kDataOffset + total);
    REQUIRE(::pread(fd.get(), x.data(), x.size(), 0) == ssize_t(x.size()));
    REQUIRE(::pread(fb.get(), y.data(), y.size(), 0) == ssize_t(y.size()));
    CHECK(x == y);
}
