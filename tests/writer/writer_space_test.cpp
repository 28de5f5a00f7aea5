// Writer and the file's space: writes held while the file is allocated, a switch to the next file
// with writes in flight, the hard and soft size limits.
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
