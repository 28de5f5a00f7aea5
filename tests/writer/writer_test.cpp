// Writer tests: real writes (io_uring SQEs, or pwrite on the epoll backend) to a temp file, checked
// by reading the file back byte for byte. Faults (short writes, EAGAIN, EIO) are injected through
// Writer::set_fault on top of the kernel's real result, so every case is deterministic.
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

TEST_CASE("OutputFile appears at its path only when published", "[writer]") {
    // Nameless (O_TMPFILE) here; where a filesystem lacks it, under an unpredictable temporary name.
    const bool named = GENERATE(false, true);
    INFO((named ? "named temporaries" : "O_TMPFILE"));
    force_named_temporaries(named);
    TempPath t;
    {
        UniqueFd old(::open(t.path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        REQUIRE(old);
        REQUIRE(::write(old.get(), "old", 3) == 3);
    }
    {
        OutputFile f = OutputFile::create(t.path, true);
        f.pwrite_all("new!", 4, 0);
        // The old file, the marker that says a ringcap is starting on it, and a named temporary.
        const auto during = dir_entries(t.dir);
        CHECK(during.size() == (named ? 3u : 2u));
        CHECK(std::count_if(during.begin(), during.end(),
                            [](const std::string& e) { return e.rfind(".out.data.ringcap-starting-", 0) == 0; }) == 1);
        CHECK(leftover_temporaries(t.path) == (named ? 1u : 0u));
        CHECK(file_size(t.path) == 3);  // the existing file is untouched until publish()
    }
    CHECK(dir_entries(t.dir) == std::vector<std::string>{"out.data"});  // never published: no trace
    CHECK(file_size(t.path) == 3);

    OutputFile f = OutputFile::create(t.path, true);
    f.pwrite_all("new!", 4, 0);
    f.publish();
    CHECK(file_size(t.path) == 4);
    CHECK(file_size(t.path + ".old") == 3);  // kept, as perf does
    CHECK(dir_entries(t.dir) == std::vector<std::string>{"out.data", "out.data.old"});
    // Rotation's rename: a new name made from the fd, never over an existing file.
    CHECK(f.rename_to(t.dir + "/out.data.old") == false);
    CHECK(f.rename_to(t.dir + "/out.data.1"));
    CHECK(dir_entries(t.dir) == std::vector<std::string>{"out.data.1", "out.data.old"});
    CHECK(file_size(t.dir + "/out.data.1") == 4);
    force_named_temporaries(false);
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

TEST_CASE("Writer holds new writes while the file is being allocated, then sends them", "[writer][space]") {
    // ext4 holds the inode lock exclusively during fallocate: an O_DIRECT write issued meanwhile would
    // go to an io_uring worker. Simulated here: the allocation is marked under way by hand.
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    Rig r(be, kBuf, 8);
    FileSpace busy(kDataOffset, true);
    Writer w(*r.loop, r.file, r.pool, busy);
    uint64_t off = 0, len = 0;
    REQUIRE(busy.begin_allocation(kDataOffset, &off, &len));
    REQUIRE(r.fill(2 * kBuf) == 2 * kBuf);
    w.queue_ready();
    CHECK(w.in_flight() == 0);
    CHECK(r.pool.has_ready());
    busy.allocated(0);
    w.queue_ready();
    // The first write goes out and, with less than kAhead allocated beyond it, starts the next
    // allocation; the second waits for that one (its SQE would follow the fallocate's).
    CHECK(w.in_flight() == 1);
    CHECK(busy.allocating());
    CHECK(r.pool.has_ready());
    w.wait_idle();
    CHECK_FALSE(r.pool.has_ready());
    CHECK(w.stats().writes == 2);
    CHECK(first_mismatch(r.tmp.path, kDataOffset, 2 * kBuf) == -1);
}

TEST_CASE("Writer switch_to: buffers after a switch go to the next file, writes in flight end in the first",
          "[writer][rotation]") {
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    Rig r(be, kBuf, 8);
    REQUIRE(r.fill(3 * kBuf) == 3 * kBuf);
    r.writer.queue_ready();  // in flight to the first file
    TempPath next_path;
    OutputFile next = OutputFile::create(next_path.path);
    next.publish();
    FileSpace next_space{kDataOffset, false};
    r.writer.switch_to(next, next_space);
    REQUIRE(r.fill(2 * kBuf) == 2 * kBuf);
    r.writer.queue_ready();
    r.writer.wait_idle();
    CHECK_FALSE(r.writer.failed());
    CHECK(r.writer.previous_in_flight() == 0);
    CHECK(r.writer.previous_failed_offset() == UINT64_MAX);
    // The first file holds the stream up to the switch, the next one the rest from its data offset.
    CHECK(first_mismatch(r.tmp.path, kDataOffset, 3 * kBuf) == -1);
    CHECK(file_size(r.tmp.path) == kDataOffset + 3 * kBuf);
    CHECK(file_size(next_path.path) == kDataOffset + 2 * kBuf);
    UniqueFd fd(::open(next_path.path.c_str(), O_RDONLY | O_CLOEXEC));
    std::vector<uint8_t> got(2 * kBuf);
    REQUIRE(::pread(fd.get(), got.data(), got.size(), kDataOffset) == ssize_t(got.size()));
    size_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != pattern(3 * kBuf + i);
    CHECK(wrong == 0);
    // What it owes is counted in the next file now.
    CHECK(r.writer.durable_size() == 2 * kBuf);
    CHECK(r.space.end() == kDataOffset + 3 * kBuf);
    CHECK(next_space.end() == kDataOffset + 2 * kBuf);
}

TEST_CASE("Writer under a hard size limit refuses the buffers beyond it and counts them, the soft one fires once",
          "[writer][rotation]") {
    Rig r(Backend::Epoll, kBuf, 8);
    int soft_calls = 0;
    r.space.on_soft_limit([&] { ++soft_calls; });
    r.space.set_limit(kDataOffset + kBuf, kDataOffset + 2 * kBuf + 100);
    REQUIRE(r.fill(5 * kBuf) == 5 * kBuf);
    r.writer.queue_ready();
    r.writer.wait_idle();
    CHECK_FALSE(r.writer.failed());
    CHECK(soft_calls == 1);
    CHECK(r.space.soft_limit_reached());
    CHECK(r.writer.stats().refused_buffers == 3);
    CHECK(r.writer.stats().refused_bytes == 3 * kBuf);
    CHECK(r.pool.free_count() == 8);  // refused buffers went back to the pool
    CHECK(file_size(r.tmp.path) == kDataOffset + 2 * kBuf);
    CHECK(first_mismatch(r.tmp.path, kDataOffset, 2 * kBuf) == -1);
}
