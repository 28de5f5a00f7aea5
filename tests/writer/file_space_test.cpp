// FileSpace without the kernel: offsets, allocation ahead of the writes, ENOSPC, chunk splits.
#include <catch2/catch.hpp>

#include <cerrno>

#include "ringcap/file_space.hpp"

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
