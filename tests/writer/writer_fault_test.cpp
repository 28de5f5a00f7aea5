// Writer faults beyond the plain ones of writer_error_test.cpp: results io_uring gives that pwrite never
// does. Injected through Writer::set_fault on top of the kernel's real result, as there.
#include <catch2/catch.hpp>

#include <cerrno>
#include <vector>

#include "writer_rig.hpp"

using namespace writer_rig;

TEST_CASE("Writer resends a write that completed with ECANCELED, and reports one that keeps being cancelled",
          "[writer]") {
    // An unlinked write SQE is cancelled before it ran (io-wq could not start a worker, or the ring
    // is being torn down): nothing of it reached the file, and sending it again at its offset is safe.
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    INFO("backend " << backend_name(be));
    constexpr size_t bs = ringcap::kMinBufferBytes;
    Rig r(be, bs, 8, false);
    const uint64_t bad = kDataOffset + 2 * bs;  // the 3rd buffer
    SECTION("cancelled twice, then written") {
        int cancels = 0;
        r.writer.set_fault([&](uint64_t off, uint32_t, int res) {
            return off == bad && cancels++ < 2 ? -ECANCELED : res;
        });
        REQUIRE(r.fill(6 * bs) == 6 * bs);
        r.writer.queue_ready();
        r.writer.wait_idle();
        CHECK_FALSE(r.writer.failed());
        CHECK(r.writer.stats().retries == 2);
        CHECK(r.writer.stats().bytes == 6 * bs);
        CHECK(r.writer.durable_size() == 6 * bs);
        CHECK(r.writer.bytes_kept() == 6 * bs);
        CHECK(r.pool.free_count() == r.pool.count());
        CHECK(first_mismatch(r.tmp.path, kDataOffset, 6 * bs) == -1);
    }
    SECTION("cancelled every time: an error, not a silent hole") {
        r.writer.set_fault([&](uint64_t off, uint32_t, int res) { return off == bad ? -ECANCELED : res; });
        REQUIRE(r.fill(6 * bs) == 6 * bs);
        r.writer.queue_ready();
        r.writer.wait_idle();
        CHECK(r.writer.failed());
        CHECK(r.writer.error() == ECANCELED);
        CHECK(r.writer.stats().retries == 1000);  // the bound EAGAIN has, then an error
        CHECK(r.writer.bytes_kept() == bad - kDataOffset);
        CHECK(r.writer.durable_size() == bad - kDataOffset);
        CHECK(r.pool.free_count() == r.pool.count());
        // What is queued after the error is dropped and counted as not kept, as after EIO.
        REQUIRE(r.fill(bs) == bs);
        r.writer.queue_ready();
        CHECK(r.writer.in_flight() == 0);
        CHECK(r.writer.error() == ECANCELED);
        CHECK(r.writer.bytes_kept() == bad - kDataOffset);
    }
}
