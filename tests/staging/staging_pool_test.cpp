// StagingPool: geometry checks, buffer alignment, the ready queue's stream order, exhaustion and
// reuse, append() straddling buffers, free_bytes() accounting and take_partial().
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "ringcap/staging.hpp"

using ringcap::kMinStagingBytes;
using ringcap::kStagingAlign;
using ringcap::StagingBuffer;
using ringcap::StagingPool;

namespace {

// Fills the whole of the current buffer with `tag` and commits it, so it moves to the ready queue.
uint32_t fill_one(StagingPool& pool, std::byte tag) {
    auto w = pool.writable();
    REQUIRE(w.size() == pool.buffer_size());
    std::memset(w.data(), std::to_integer<int>(tag), w.size());
    const auto* first = w.data();
    pool.commit(w.size());
    // Recover the index of the buffer we just filled: writable() handed out buffer(i) at offset 0.
    for (uint32_t i = 0; i < pool.count(); ++i)
        if (pool.buffer(i) == first) return i;
    FAIL("writable() returned memory that is not one of the pool's buffers");
    return 0;
}

bool all_bytes(const std::byte* p, size_t n, std::byte v) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != v) return false;
    return true;
}

}  // namespace

TEST_CASE("StagingPool rejects bad geometry", "[staging]") {
    // Not a multiple of 4096 (or zero).
    CHECK_THROWS_AS(StagingPool(0, 64), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(4095, 64), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(4097, 64), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(4096 + 512, 64), std::invalid_argument);
    // Fewer than two buffers, even when one buffer alone is big enough.
    CHECK_THROWS_AS(StagingPool(kMinStagingBytes, 1), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(4 * kMinStagingBytes, 1), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(4096, 0), std::invalid_argument);
    // Less than 128 KiB in all: one buffer short of the minimum.
    CHECK_THROWS_AS(StagingPool(4096, kMinStagingBytes / 4096 - 1), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(16384, 7), std::invalid_argument);

    // The boundaries themselves are accepted.
    CHECK_NOTHROW(StagingPool(4096, kMinStagingBytes / 4096));
    CHECK_NOTHROW(StagingPool(kMinStagingBytes / 2, 2));
    CHECK_NOTHROW(StagingPool(65536, 4));
}

TEST_CASE("StagingPool hands out 4096-aligned buffers and starts empty", "[staging]") {
    const size_t size = GENERATE(size_t(4096), size_t(8192), size_t(65536));
    const size_t count = kMinStagingBytes / size + 3;
    StagingPool pool(size, count);
    REQUIRE(pool.buffer_size() == size);
    REQUIRE(pool.count() == count);
    std::vector<std::byte*> seen;
    for (uint32_t i = 0; i < count; ++i) {
        // O_DIRECT writes and registered buffers need page alignment.
        CHECK(reinterpret_cast<uintptr_t>(pool.buffer(i)) % kStagingAlign == 0);
        seen.push_back(pool.buffer(i));
    }
    std::sort(seen.begin(), seen.end());
    CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // distinct buffers

    CHECK(pool.free_bytes() == size * count);
    CHECK(pool.free_count() == count);
    CHECK_FALSE(pool.has_ready());
    CHECK_FALSE(pool.take_partial().has_value());
    CHECK(pool.bytes_committed() == 0);
}

TEST_CASE("StagingPool writable/commit fill buffers and queue them in fill order", "[staging]") {
    StagingPool pool(4096, 32);
    const size_t total = 4096 * 32;

    SECTION("a partial commit keeps the buffer current and continues where it stopped") {
        auto w1 = pool.writable();
        REQUIRE(w1.size() == 4096);
        pool.commit(100);
        CHECK(pool.free_bytes() == total - 100);
        CHECK(pool.bytes_committed() == 100);
        CHECK_FALSE(pool.has_ready());
        auto w2 = pool.writable();
        CHECK(w2.data() == w1.data() + 100);
        CHECK(w2.size() == 4096 - 100);
        // Completing the buffer queues it.
        pool.commit(w2.size());
        CHECK(pool.has_ready());
        CHECK(pool.free_bytes() == total - 4096);
        StagingBuffer b = pool.pop_ready();
        CHECK(b.data == w1.data());
        CHECK(b.data == pool.buffer(b.index));
        CHECK(b.len == 4096);
        CHECK_FALSE(pool.has_ready());
    }

    SECTION("pop_ready returns full buffers in the order they filled, across releases") {
        // Fill 5 buffers with distinct tags, pop only 2, release them in reverse, then fill more: the
        // free stack hands them out in a different order but the queue stays in fill order.
        std::vector<uint32_t> filled;
        for (int t = 0; t < 5; ++t) filled.push_back(fill_one(pool, std::byte(t + 1)));
        StagingBuffer a = pool.pop_ready();
        StagingBuffer b = pool.pop_ready();
        CHECK(a.index == filled[0]);
        CHECK(b.index == filled[1]);
        CHECK(all_bytes(a.data, a.len, std::byte(1)));
        CHECK(all_bytes(b.data, b.len, std::byte(2)));
        pool.release(b.index);
        pool.release(a.index);
        for (int t = 5; t < 30; ++t) filled.push_back(fill_one(pool, std::byte(t + 1)));
        for (size_t k = 2; k < filled.size(); ++k) {
            REQUIRE(pool.has_ready());
            StagingBuffer r = pool.pop_ready();
            CHECK(r.index == filled[k]);
            CHECK(r.len == 4096);
            CHECK(all_bytes(r.data, r.len, std::byte(k + 1)));
        }
        CHECK_FALSE(pool.has_ready());
    }
}

TEST_CASE("StagingPool runs dry when every buffer is full or taken, release makes one reusable", "[staging]") {
    StagingPool pool(8192, 16);
    std::vector<uint32_t> filled;
    for (size_t i = 0; i < pool.count(); ++i) filled.push_back(fill_one(pool, std::byte(0x40 + i)));

    CHECK(pool.free_bytes() == 0);
    CHECK(pool.free_count() == 0);
    CHECK(pool.writable().empty());
    CHECK(pool.writable().empty());  // asking again does not conjure a buffer

    // Popping does not free anything: a popped buffer is being written until release().
    std::vector<StagingBuffer> popped;
    while (pool.has_ready()) popped.push_back(pool.pop_ready());
    REQUIRE(popped.size() == pool.count());
    CHECK(pool.writable().empty());
    CHECK(pool.free_bytes() == 0);

    pool.release(popped[7].index);
    CHECK(pool.free_count() == 1);
    CHECK(pool.free_bytes() == 8192);
    auto w = pool.writable();
    REQUIRE(w.size() == 8192);
    CHECK(w.data() == popped[7].data);  // the released buffer, from its start
    CHECK(pool.free_count() == 0);
    CHECK(pool.free_bytes() == 8192);   // still counted: it is now the current buffer
    pool.commit(8192);
    CHECK(pool.writable().empty());
    REQUIRE(pool.has_ready());
    CHECK(pool.pop_ready().index == popped[7].index);

    for (auto& b : popped) pool.release(b.index);
    CHECK(pool.free_count() == pool.count());
    CHECK(pool.free_bytes() == 8192 * pool.count());
}

TEST_CASE("StagingPool append straddles buffers and never half-appends", "[staging]") {
    StagingPool pool(4096, 32);
    const uint64_t obj = 0x1122334455667788ull;

    SECTION("an object across a buffer boundary lands in two consecutive buffers") {
        auto w = pool.writable();
        std::memset(w.data(), 0xAB, 4096 - 3);
        pool.commit(4096 - 3);
        REQUIRE(pool.append(&obj, sizeof obj));
        CHECK(pool.bytes_committed() == 4096 + 5);
        CHECK(pool.free_bytes() == 32 * 4096 - 4096 - 5);

        REQUIRE(pool.has_ready());
        StagingBuffer first = pool.pop_ready();
        CHECK(first.len == 4096);
        CHECK(all_bytes(first.data, 4096 - 3, std::byte(0xAB)));
        auto partial = pool.take_partial();
        REQUIRE(partial.has_value());
        CHECK(partial->len == 5);
        CHECK(partial->index != first.index);

        std::byte joined[sizeof obj];
        std::memcpy(joined, first.data + 4096 - 3, 3);
        std::memcpy(joined + 3, partial->data, 5);
        CHECK(std::memcmp(joined, &obj, sizeof obj) == 0);
    }

    SECTION("append fails and writes nothing when free_bytes() < n") {
        // Fill all but 5 bytes: 31 full buffers (popped, not released) and 4091 bytes of the last.
        for (int i = 0; i < 31; ++i) fill_one(pool, std::byte(i));
        std::vector<StagingBuffer> held;
        while (pool.has_ready()) held.push_back(pool.pop_ready());
        auto w = pool.writable();
        std::memset(w.data(), 0xCD, w.size());  // the uncommitted 5 bytes too: they must stay 0xCD
        pool.commit(4091);
        REQUIRE(pool.free_bytes() == 5);
        const uint64_t committed = pool.bytes_committed();

        CHECK_FALSE(pool.append(&obj, sizeof obj));
        CHECK(pool.free_bytes() == 5);
        CHECK(pool.bytes_committed() == committed);
        CHECK_FALSE(pool.has_ready());
        CHECK(all_bytes(w.data() + 4091, 5, std::byte(0xCD)));  // nothing half-written

        // Exactly the free space fits, and fills the last buffer.
        const uint8_t five[5] = {1, 2, 3, 4, 5};
        CHECK(pool.append(five, sizeof five));
        CHECK(pool.free_bytes() == 0);
        REQUIRE(pool.has_ready());
        StagingBuffer last = pool.pop_ready();
        CHECK(std::memcmp(last.data + 4091, five, 5) == 0);
        CHECK_FALSE(pool.append(&obj, 1));

        // Once a write completes there is room again.
        pool.release(held[0].index);
        CHECK(pool.append(&obj, sizeof obj));
        CHECK(pool.free_bytes() == 4096 - sizeof obj);
    }
}

TEST_CASE("StagingPool take_partial returns the current buffer, or nothing", "[staging]") {
    StagingPool pool(4096, 32);
    const size_t total = 4096 * 32;

    CHECK_FALSE(pool.take_partial().has_value());
    // A current buffer with nothing committed is not a partial buffer.
    auto w = pool.writable();
    REQUIRE_FALSE(w.empty());
    CHECK_FALSE(pool.take_partial().has_value());
    CHECK(pool.free_bytes() == total);

    std::memset(w.data(), 0x5A, 100);
    pool.commit(100);
    auto p = pool.take_partial();
    REQUIRE(p.has_value());
    CHECK(p->data == w.data());
    CHECK(p->data == pool.buffer(p->index));
    CHECK(p->len == 100);
    CHECK(all_bytes(p->data, 100, std::byte(0x5A)));
    // Taken: neither it nor its unused tail counts as free until released, and it is not handed out.
    CHECK(pool.free_bytes() == total - 4096);
    CHECK_FALSE(pool.take_partial().has_value());
    auto next = pool.writable();
    CHECK(next.data() != p->data);
    CHECK(next.size() == 4096);

    pool.release(p->index);
    CHECK(pool.free_bytes() == total);

    // Full buffers go to the ready queue, not take_partial: after exactly one buffer, nothing partial.
    pool.commit(4096);
    CHECK(pool.has_ready());
    CHECK_FALSE(pool.take_partial().has_value());
}
