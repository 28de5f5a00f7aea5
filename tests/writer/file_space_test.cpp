// FileSpace without the kernel: offsets, allocation ahead of the writes, ENOSPC, chunk splits, the growth notice.
#include <catch2/catch.hpp>

#include <cerrno>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ringcap/file_space.hpp"
#include "ringcap/sys.hpp"
#include "tools.hpp"

using ringcap::FileSpace;

namespace {
constexpr uint64_t kBase = 4096;
constexpr uint64_t MiB = 1 << 20;
}  // namespace

TEST_CASE("FileSpace hands out consecutive offsets from the data section's start", "[writer][space]") {
    FileSpace space(kBase, false);
    CHECK(space.reserve(MiB) == kBase);
    CHECK(space.reserve(4096) == kBase + MiB);
    CHECK(space.end() == kBase + MiB + 4096);
    uint64_t off = 0, len = 0;
    CHECK_FALSE(space.begin_allocation(space.end(), &off, &len));  // not preallocating
    CHECK(space.split(kBase + 64 * MiB - 8192, MiB) == MiB);       // nothing to split at
}

TEST_CASE("FileSpace keeps kAhead allocated beyond the writes, one allocation at a time", "[writer][space]") {
    FileSpace space(kBase, true);
    uint64_t off = 0, len = 0;
    REQUIRE(space.begin_allocation(kBase, &off, &len));
    CHECK(off == kBase);
    CHECK(len == FileSpace::kChunk);
    CHECK(space.allocating());
    uint64_t off2 = 0, len2 = 0;
    CHECK_FALSE(space.begin_allocation(kBase, &off2, &len2));  // one at a time
    space.allocated(0);
    CHECK_FALSE(space.allocating());
    CHECK(space.allocated_end() == kBase + FileSpace::kChunk);
    REQUIRE(space.begin_allocation(kBase, &off, &len));  // still less than kAhead beyond
    CHECK(off == kBase + FileSpace::kChunk);
    space.allocated(0);
    CHECK_FALSE(space.begin_allocation(kBase, &off, &len));  // kAhead allocated: enough
    CHECK(space.begin_allocation(kBase + MiB, &off, &len));  // the writes moved on
}

TEST_CASE("FileSpace::allocate_now: kAtSetup allocated before any write, so the first writes start no allocation",
          "[writer][space]") {
    TempFile tmp("space");
    ringcap::UniqueFd fd(::open(tmp.path.c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE(fd);
    FileSpace space(kBase, true);
    space.allocate_now(fd.get());
    if (!space.preallocating()) skip_test(tmp.path + ": fallocate is refused on this filesystem");
    CHECK(space.allocated_end() == kBase + FileSpace::kAtSetup);
    struct stat st {};
    REQUIRE(::fstat(fd.get(), &st) == 0);
    CHECK(uint64_t(st.st_size) == kBase + FileSpace::kAtSetup);
    CHECK(uint64_t(st.st_blocks) * 512 >= FileSpace::kAtSetup);
    uint64_t off = 0, len = 0;
    CHECK_FALSE(space.begin_allocation(kBase + MiB, &off, &len));  // an idle capture's first write
    CHECK_FALSE(space.begin_allocation(kBase + FileSpace::kAtSetup - FileSpace::kAhead, &off, &len));
    CHECK(space.begin_allocation(kBase + FileSpace::kAtSetup - FileSpace::kAhead + 4096, &off, &len));
    CHECK(off == kBase + FileSpace::kAtSetup);
}

TEST_CASE("FileSpace halves its chunk on ENOSPC, then gives up and lets writes append", "[writer][space]") {
    FileSpace space(kBase, true);
    uint64_t off = 0, len = 0, expect = FileSpace::kChunk;
    while (expect >= FileSpace::kMinChunk) {
        REQUIRE(space.begin_allocation(kBase, &off, &len));
        CHECK(len == expect);
        space.allocated(-ENOSPC);
        expect /= 2;
    }
    CHECK_FALSE(space.preallocating());
    CHECK_FALSE(space.begin_allocation(kBase, &off, &len));
    FileSpace other(kBase, true);
    REQUIRE(other.begin_allocation(kBase, &off, &len));
    other.allocated(-EOPNOTSUPP);  // a filesystem without fallocate: stop at once
    CHECK_FALSE(other.preallocating());
}

TEST_CASE("FileSpace splits a write at a chunk's end (each chunk is one extent)", "[writer][space]") {
    FileSpace space(kBase, true);
    const uint64_t boundary = kBase + FileSpace::kChunk;
    CHECK(space.split(kBase, MiB) == MiB);
    CHECK(space.split(boundary - 1000, MiB) == 1000);
    CHECK(space.split(boundary, MiB) == MiB);
    CHECK(space.split(boundary - MiB, MiB) == MiB);  // ends exactly there
}

TEST_CASE("FileSpace growth notice: armed once, written by the next reservation, refused when already grown",
          "[writer][space]") {
    FileSpace space(4096, false);
    ringcap::UniqueFd ev(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    REQUIRE(ev);
    auto count = [&] {
        uint64_t n = 0;
        return ::read(ev.get(), &n, sizeof n) == sizeof n ? n : 0;
    };
    const uint64_t seen = space.end();
    REQUIRE(space.notify_growth(ev.get(), seen + 1));
    CHECK(count() == 0);  // nothing grew yet
    space.reserve(4096);
    space.reserve(4096);
    CHECK(count() == 1);  // one notice, however many reservations follow
    space.reserve(4096);
    CHECK(count() == 0);
    // Grown since the caller looked: nothing armed, the caller does not sleep.
    CHECK_FALSE(space.notify_growth(ev.get(), seen + 1));
    space.reserve(4096);
    CHECK(count() == 0);
    // Reservations under a --max-size limit tell it too.
    space.set_limit(1 << 30, 1 << 30);
    REQUIRE(space.notify_growth(ev.get(), space.end() + 1));
    uint64_t offset = 0;
    REQUIRE(space.reserve_within(4096, &offset));
    CHECK(count() == 1);
    // Cancelled: the session's own writes after it woke do not wake it again.
    // Only once the end reaches the target: a round's worth of data, not every buffer.
    REQUIRE(space.notify_growth(ev.get(), space.end() + 3 * 4096));
    space.reserve(4096);
    space.reserve(4096);
    CHECK(count() == 0);
    space.reserve(4096);
    CHECK(count() == 1);
    REQUIRE(space.notify_growth(ev.get(), space.end() + 1));
    space.cancel_growth_notice();
    space.reserve(4096);
    CHECK(count() == 0);
}
