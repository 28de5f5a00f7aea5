// StagingPool: geometry checks, buffer alignment, the ready queue's fill order, exhaustion and
// reuse, whole-record append() and padding, free_bytes() accounting and take_partial().
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <sys/mman.h>
#include <vector>

#include "ringcap/records.hpp"
#include "ringcap/staging.hpp"

using ringcap::kMaxRecordBytes;
using ringcap::kMinBufferBytes;
using ringcap::kRecordPadding;
using ringcap::kStagingAlign;
using ringcap::StagingBuffer;
using ringcap::StagingPool;

namespace {

constexpr size_t B = kMinBufferBytes;  // the smallest buffer

// The records in [p, p + n): {type, size} each; stops at a bad size.
std::vector<std::pair<uint32_t, uint16_t>> records_in(const std::byte* p, size_t n) {
    std::vector<std::pair<uint32_t, uint16_t>> out;
    for (size_t off = 0; off + sizeof(perf_event_header) <= n;) {
        perf_event_header h;
        std::memcpy(&h, p + off, sizeof h);
        if (h.size < sizeof h || off + h.size > n) break;
        out.emplace_back(h.type, h.size);
        off += h.size;
    }
    return out;
}

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

TEST_CASE("StagingPool::prefault makes every page of every buffer resident", "[staging]") {
    // Big enough that mimalloc maps the buffers fresh (untouched pages are not resident).
    constexpr size_t kSize = 1u << 20, kCount = 4, kPages = kSize / 4096;
    StagingPool pool(kSize, kCount);
    auto resident = [&](uint32_t i) {
        std::vector<unsigned char> v(kPages);
        REQUIRE(::mincore(pool.buffer(i), kSize, v.data()) == 0);
        return size_t(std::count_if(v.begin(), v.end(), [](unsigned char c) { return c & 1; }));
    };
    size_t before = 0;
    for (uint32_t i = 0; i < kCount; ++i) before += resident(i);
    INFO("resident pages before: " << before << " of " << kCount * kPages);
    pool.prefault();
    for (uint32_t i = 0; i < kCount; ++i) CHECK(resident(i) == kPages);
}

TEST_CASE("StagingPool rejects bad geometry", "[staging]") {
    // Not a multiple of 4096, or too small for the largest record.
    CHECK_THROWS_AS(StagingPool(0, 64), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(4096, 64), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(B - 4096, 64), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(B + 512, 64), std::invalid_argument);
    // Fewer than two buffers.
    CHECK_THROWS_AS(StagingPool(B, 1), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(4 * B, 1), std::invalid_argument);
    CHECK_THROWS_AS(StagingPool(B, 0), std::invalid_argument);
    // The boundaries themselves are accepted.
    CHECK_NOTHROW(StagingPool(B, 2));
    CHECK_NOTHROW(StagingPool(B + 4096, 2));
    CHECK_NOTHROW(StagingPool(1 << 20, 4));
}

TEST_CASE("StagingPool hands out 4096-aligned buffers and starts empty", "[staging]") {
    const size_t size = GENERATE(size_t(65536), size_t(131072), size_t(1048576));
    const size_t count = 3;
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
    StagingPool pool(B, 32);
    const size_t total = B * 32;

    SECTION("a partial commit keeps the buffer current and continues where it stopped") {
        auto w1 = pool.writable();
        REQUIRE(w1.size() == B);
        pool.commit(100);
        CHECK(pool.free_bytes() == total - 100);
        CHECK(pool.bytes_committed() == 100);
        CHECK_FALSE(pool.has_ready());
        auto w2 = pool.writable();
        CHECK(w2.data() == w1.data() + 100);
        CHECK(w2.size() == B - 100);
        // Completing the buffer queues it.
        pool.commit(w2.size());
        CHECK(pool.has_ready());
        CHECK(pool.free_bytes() == total - B);
        StagingBuffer b = pool.pop_ready();
        CHECK(b.data == w1.data());
        CHECK(b.data == pool.buffer(b.index));
        CHECK(b.len == B);
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
            CHECK(r.len == B);
            CHECK(all_bytes(r.data, r.len, std::byte(k + 1)));
        }
        CHECK_FALSE(pool.has_ready());
    }
}

TEST_CASE("StagingPool runs dry when every buffer is full or taken, release makes one reusable", "[staging]") {
    StagingPool pool(B, 16);
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
    CHECK(pool.free_bytes() == B);
    auto w = pool.writable();
    REQUIRE(w.size() == B);
    CHECK(w.data() == popped[7].data);  // the released buffer, from its start
    CHECK(pool.free_count() == 0);
    CHECK(pool.free_bytes() == B);   // still counted: it is now the current buffer
    pool.commit(B);
    CHECK(pool.writable().empty());
    REQUIRE(pool.has_ready());
    CHECK(pool.pop_ready().index == popped[7].index);

    for (auto& b : popped) pool.release(b.index);
    CHECK(pool.free_count() == pool.count());
    CHECK(pool.free_bytes() == B * pool.count());
}

TEST_CASE("StagingPool append keeps records whole: the rest of a buffer becomes padding", "[staging]") {
    StagingPool pool(B, 3);
    std::vector<std::byte> rec(4096);
    const perf_event_header h{PERF_RECORD_SAMPLE, 0, 4096};
    std::memcpy(rec.data(), &h, sizeof h);
    std::memset(rec.data() + sizeof h, 0x5A, rec.size() - sizeof h);

    SECTION("a record that does not fit in the rest goes to the next buffer, after padding") {
        auto w = pool.writable();
        pool.commit(B - 3000);  // as if a reader had left 3000 bytes, less than the record
        REQUIRE(pool.append(rec.data(), rec.size()));
        REQUIRE(pool.has_ready());
        const StagingBuffer first = pool.pop_ready();
        CHECK(first.len == B);
        // What was committed, then one padding record of exactly the rest.
        auto tail = records_in(first.data + B - 3000, 3000);
        REQUIRE(tail.size() == 1);
        CHECK(tail[0] == std::pair<uint32_t, uint16_t>{kRecordPadding, 3000});
        CHECK(all_bytes(first.data + B - 3000 + sizeof(perf_event_header), 3000 - sizeof(perf_event_header),
                        std::byte{0}));
        // The record, whole, at the start of the next buffer.
        auto partial = pool.take_partial();
        REQUIRE(partial.has_value());
        CHECK(partial->len == rec.size());
        CHECK(std::memcmp(partial->data, rec.data(), rec.size()) == 0);
        CHECK(pool.bytes_committed() == B + rec.size());
    }

    SECTION("no free buffer to move to: nothing is written, nothing is padded") {
        fill_one(pool, std::byte{1});
        fill_one(pool, std::byte{2});
        auto w = pool.writable();
        std::memset(w.data(), 0xCD, w.size());
        pool.commit(B - 3000);
        const uint64_t committed = pool.bytes_committed();
        CHECK_FALSE(pool.append(rec.data(), rec.size()));
        CHECK(pool.bytes_committed() == committed);
        CHECK(all_bytes(w.data() + B - 3000, 3000, std::byte(0xCD)));
        // A small record still fits in the rest.
        CHECK(pool.append(rec.data(), 8));
        // Once a write completes the big one goes in, after padding.
        StagingBuffer done = pool.pop_ready();
        pool.release(done.index);
        CHECK(pool.append(rec.data(), rec.size()));
    }
}

TEST_CASE("StagingPool pads to 4 KiB for a partial write, and in u16-sized records", "[staging]") {
    StagingPool pool(1 << 20, 2);
    auto w = pool.writable();
    pool.commit(1000);
    pool.pad_to_alignment();
    CHECK(pool.current_fill() == 4096);
    auto recs = records_in(w.data() + 1000, 4096 - 1000);
    REQUIRE(recs.size() == 1);
    CHECK(recs[0] == std::pair<uint32_t, uint16_t>{kRecordPadding, 4096 - 1000});
    pool.pad_to_alignment();  // already aligned: nothing
    CHECK(pool.current_fill() == 4096);

    // The rest of a 1 MiB buffer is more than one record can say (header.size is a u16).
    pool.pad_current();
    REQUIRE(pool.has_ready());
    const StagingBuffer b = pool.pop_ready();
    recs = records_in(b.data + 4096, b.len - 4096);
    size_t covered = 0;
    for (const auto& [type, size] : recs) {
        CHECK(type == kRecordPadding);
        CHECK(size <= kMaxRecordBytes);
        covered += size;
    }
    CHECK(covered == (1u << 20) - 4096);
}

TEST_CASE("StagingPool take_partial returns the current buffer, or nothing", "[staging]") {
    StagingPool pool(B, 32);
    const size_t total = B * 32;

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
    CHECK(pool.free_bytes() == total - B);
    CHECK_FALSE(pool.take_partial().has_value());
    auto next = pool.writable();
    CHECK(next.data() != p->data);
    CHECK(next.size() == B);

    pool.release(p->index);
    CHECK(pool.free_bytes() == total);

    // Full buffers go to the ready queue, not take_partial: after exactly one buffer, nothing partial.
    pool.commit(B);
    CHECK(pool.has_ready());
    CHECK_FALSE(pool.take_partial().has_value());
}

TEST_CASE("StagingPool: each buffer carries the samples committed into it, from zero when it is taken again",
          "[staging]") {
    StagingPool pool(B, 2);
    pool.writable();
    pool.commit(100, 3);
    pool.commit(B - 100, 4);
    const StagingBuffer full = pool.pop_ready();
    CHECK(full.samples == 7);
    pool.writable();
    pool.commit(200, 2);
    auto partial = pool.take_partial();
    REQUIRE(partial);
    CHECK(partial->samples == 2);
    CHECK(partial->len == 200);
    pool.release(full.index);
    pool.release(partial->index);
    // A reused buffer starts its count again; padding and appended records are not samples.
    pool.writable();
    pool.commit(64, 1);
    pool.pad_current();
    CHECK(pool.peek_ready().samples == 1);
}
