// The ring reader tests' fakes: a zeroed control page, a power-of-two data area and a fake producer
// that writes records the way the kernel does (whole records, wrapping at the end of the area,
// refusing what does not fit before data_tail, publishing data_head with a release store), and the
// writer's side of staging (ring_reader_test.cpp, ring_reader_staging_test.cpp,
// ring_reader_events_test.cpp, ring_reader_stack_test.cpp).
#pragma once

#include <catch2/catch.hpp>

#include <linux/perf_event.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ringcap/records.hpp"
#include "ringcap/ring.hpp"
#include "ringcap/staging.hpp"

namespace ring_fake {

using ringcap::DrainResult;
using ringcap::kMinBufferBytes;
using ringcap::kRecordPadding;
using ringcap::EventCounters;
using ringcap::IdMap;
using ringcap::RingReader;
using ringcap::RingView;
using ringcap::StagingBuffer;
using ringcap::StagingPool;

using Bytes = std::vector<std::byte>;

inline void put(Bytes& out, const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
}

// "" when equal, else where the streams part (comparing the vectors directly would make Catch print
// megabytes of "{?}").
inline std::string stream_diff(const Bytes& got, const Bytes& want) {
    const auto [g, w] = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
    if (g == got.end() && w == want.end()) return "";
    return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size()) + ", first difference at " +
           std::to_string(g - got.begin());
}

// A record: header, then u64 fields, then `extra` payload bytes (header.size = the total).
inline Bytes make_record(uint32_t type, std::initializer_list<uint64_t> fields, size_t extra = 0, uint64_t seed = 0) {
    const size_t size = sizeof(perf_event_header) + fields.size() * 8 + extra;
    REQUIRE(size % 8 == 0);
    REQUIRE(size <= 0xffff);
    perf_event_header h{type, PERF_RECORD_MISC_USER, uint16_t(size)};
    Bytes r;
    r.reserve(size);
    put(r, &h, sizeof h);
    for (uint64_t f : fields) put(r, &f, sizeof f);
    // Payload bytes derived from the seed, so a misplaced byte shows up in a comparison.
    for (size_t i = 0; i < extra; ++i) r.push_back(std::byte((seed * 131 + i * 7 + 1) & 0xff));
    return r;
}

// Default sample layout: PERF_SAMPLE_IDENTIFIER puts the id right after the header.
inline Bytes sample(uint64_t id, size_t payload = 16, uint64_t seed = 0) {
    return make_record(PERF_RECORD_SAMPLE, {id}, payload, seed);
}
// { header; u64 id; u64 lost; sample_id (here just the identifier) }
inline Bytes lost_record(uint64_t id, uint64_t lost) { return make_record(PERF_RECORD_LOST, {id, lost, id}); }
inline Bytes throttle_record(uint64_t id) { return make_record(PERF_RECORD_THROTTLE, {1234, id, 5678}); }
// A header whose size field is `size`, in a slot of `slot` bytes (for corrupt headers).
inline Bytes raw_header(uint16_t size, size_t slot) {
    perf_event_header h{PERF_RECORD_SAMPLE, 0, size};
    Bytes r(slot, std::byte{0x77});
    std::memcpy(r.data(), &h, sizeof h);
    return r;
}

// The control page plus data area, and the kernel's side of the protocol.
struct FakeRing {
    explicit FakeRing(uint64_t size_, uint64_t start = 0)
        : size(size_), page(std::make_unique<perf_event_mmap_page>()), words(size_ / 8), head(start) {
        REQUIRE((size & (size - 1)) == 0);
        // Poison the area: a reader that copies bytes it should not shows 0xEE in the stream.
        std::memset(words.data(), 0xEE, size);
        page->data_head = start;
        page->data_tail = start;
    }

    RingView view() { return {page.get(), data(), size}; }
    std::byte* data() { return reinterpret_cast<std::byte*>(words.data()); }
    uint64_t tail() const { return __atomic_load_n(&page->data_tail, __ATOMIC_ACQUIRE); }
    uint64_t published() const { return __atomic_load_n(&page->data_head, __ATOMIC_ACQUIRE); }
    uint64_t free_space() const { return size - (head - tail()); }

    // Like perf_output_begin() on a non-overwritable ring: the record goes in whole, at
    // head & (size-1), wrapping at the end of the area, or not at all (the kernel would count it lost).
    bool write(const Bytes& rec, bool publish_now = true) {
        REQUIRE(rec.size() % 8 == 0);
        if (rec.size() > free_space()) {
            ++refused;
            return false;
        }
        const uint64_t off = head & (size - 1);
        const uint64_t first = std::min<uint64_t>(rec.size(), size - off);
        std::memcpy(data() + off, rec.data(), first);
        std::memcpy(data(), rec.data() + first, rec.size() - first);
        head += rec.size();
        if (publish_now) publish();
        return true;
    }
    // The kernel's smp_wmb() + data_head store.
    void publish() { __atomic_store_n(&page->data_head, head, __ATOMIC_RELEASE); }

    uint64_t size;
    std::unique_ptr<perf_event_mmap_page> page;  // value-initialised: zeroed
    std::vector<uint64_t> words;                 // 8-byte aligned data area
    uint64_t head;                               // producer's private head (published or not)
    uint64_t refused = 0;
};

// The writer's side of staging: takes full buffers (and optionally the partial one) in fill order and
// gives them back. Each buffer must hold whole records only; their bytes, without the padding, go to
// `stream` (with `raw`, every byte as it is: for damaged input).
struct Sink {
    explicit Sink(size_t buffer_size = kMinBufferBytes, size_t count = 32, bool raw_ = false)
        : pool(buffer_size, count), raw(raw_) {}
    void collect(bool partial = true) {
        while (pool.has_ready()) take(pool.pop_ready());
        if (partial)
            if (auto b = pool.take_partial()) take(*b);
    }
    void take(const StagingBuffer& b) {
        if (raw) put(stream, b.data, b.len);
        uint32_t samples = 0;
        for (size_t off = 0; !raw && off < b.len;) {
            perf_event_header h;
            std::memcpy(&h, b.data + off, sizeof h);
            REQUIRE(h.size >= sizeof h);
            REQUIRE(off + h.size <= b.len);  // no record runs past its buffer
            if (h.type == kRecordPadding) ++paddings;
            else put(stream, b.data + off, h.size);
            samples += h.type == PERF_RECORD_SAMPLE;
            off += h.size;
        }
        // The reader counts the samples it stages (-z's encoder takes that count for the file's).
        if (!raw) CHECK(b.samples == samples);
        pool.release(b.index);
    }
    StagingPool pool;
    bool raw;
    Bytes stream;
    size_t paddings = 0;
};

}  // namespace ring_fake
