// RingReader over fake memory: a zeroed control page, a power-of-two data area and a fake producer
// that writes records the way the kernel does (whole records, wrapping at the end of the area,
// refusing what does not fit before data_tail, publishing data_head with a release store). The
// staging stream the reader produces must be exactly the records produced, byte for byte, in order.
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

using ringcap::DrainResult;
using ringcap::kMinBufferBytes;
using ringcap::kRecordPadding;
using ringcap::EventCounters;
using ringcap::IdMap;
using ringcap::RingReader;
using ringcap::RingView;
using ringcap::StagingBuffer;
using ringcap::StagingPool;

namespace {

using Bytes = std::vector<std::byte>;

void put(Bytes& out, const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
}

// "" when equal, else where the streams part (comparing the vectors directly would make Catch print
// megabytes of "{?}").
std::string stream_diff(const Bytes& got, const Bytes& want) {
    const auto [g, w] = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
    if (g == got.end() && w == want.end()) return "";
    return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size()) + ", first difference at " +
           std::to_string(g - got.begin());
}

// A record: header, then u64 fields, then `extra` payload bytes (header.size = the total).
Bytes make_record(uint32_t type, std::initializer_list<uint64_t> fields, size_t extra = 0, uint64_t seed = 0) {
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
Bytes sample(uint64_t id, size_t payload = 16, uint64_t seed = 0) {
    return make_record(PERF_RECORD_SAMPLE, {id}, payload, seed);
}
// { header; u64 id; u64 lost; sample_id (here just the identifier) }
Bytes lost_record(uint64_t id, uint64_t lost) { return make_record(PERF_RECORD_LOST, {id, lost, id}); }
Bytes throttle_record(uint64_t id) { return make_record(PERF_RECORD_THROTTLE, {1234, id, 5678}); }
// A header whose size field is `size`, in a slot of `slot` bytes (for corrupt headers).
Bytes raw_header(uint16_t size, size_t slot) {
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
        for (size_t off = 0; !raw && off < b.len;) {
            perf_event_header h;
            std::memcpy(&h, b.data + off, sizeof h);
            REQUIRE(h.size >= sizeof h);
            REQUIRE(off + h.size <= b.len);  // no record runs past its buffer
            if (h.type == kRecordPadding) ++paddings;
            else put(stream, b.data + off, h.size);
            off += h.size;
        }
        pool.release(b.index);
    }
    StagingPool pool;
    bool raw;
    Bytes stream;
    size_t paddings = 0;
};

}  // namespace

TEST_CASE("RingReader: an empty ring drains nothing", "[ring]") {
    const uint64_t start = GENERATE(uint64_t(0), uint64_t(3 * 4096 + 64));
    FakeRing ring(4096, start);
    Sink sink;
    RingReader reader(ring.view(), nullptr, {});
    REQUIRE(reader.tail() == start);  // starts from the page's data_tail

    const size_t free_before = sink.pool.free_bytes();
    DrainResult d = reader.drain(sink.pool);
    CHECK(d.bytes == 0);
    CHECK(d.complete);
    CHECK(ring.tail() == start);
    CHECK(reader.tail() == start);
    CHECK(sink.pool.free_bytes() == free_before);
    CHECK(reader.counters().bytes == 0);
    CHECK(reader.counters().records == 0);
    CHECK(reader.counters().partial_drains == 0);
    sink.collect();
    CHECK(sink.stream.empty());
}

TEST_CASE("RingReader: a completely full ring drains whole", "[ring]") {
    // Start offsets: aligned, just past the start, with the first record straddling the end, and
    // free-running counters several laps in.
    const uint64_t size = 4096;
    const uint64_t start = GENERATE(uint64_t(0), uint64_t(8), uint64_t(4096 - 24), uint64_t(5 * 4096 + 1000));
    FakeRing ring(size, start);
    Sink sink;
    RingReader reader(ring.view(), nullptr, {});

    Bytes produced;
    std::mt19937_64 rng(42 + start);
    uint64_t n = 0;
    // Random records until little is left, then one record of exactly the remaining space.
    while (ring.free_space() > 600) {
        Bytes r = sample(7, 8 * (rng() % 63), n++);
        REQUIRE(ring.write(r));
        put(produced, r.data(), r.size());
    }
    Bytes last = sample(7, ring.free_space() - 16, n++);
    REQUIRE(ring.write(last));
    put(produced, last.data(), last.size());
    REQUIRE(ring.head - ring.tail() == size);
    // Full means full: the producer refuses even the smallest record.
    CHECK_FALSE(ring.write(sample(7, 0)));

    DrainResult d = reader.drain(sink.pool);
    CHECK(d.bytes == size);
    CHECK(d.complete);
    CHECK(ring.tail() == ring.head);
    CHECK(reader.tail() == ring.head);
    CHECK(reader.counters().records == n);
    CHECK(reader.counters().samples == n);
    CHECK(reader.counters().bytes == size);
    CHECK(reader.counters().bad_headers == 0);
    sink.collect();
    CHECK(stream_diff(sink.stream, produced) == "");
}

TEST_CASE("RingReader: records that straddle the end of the data area come out contiguous", "[ring]") {
    const uint64_t size = 4096;
    // Where the record starts, relative to the end: the header splits off its body (-8), the id is
    // the last word (-16), the split is mid-payload (-24), or the record ends exactly at the end (-64).
    const uint64_t back = GENERATE(uint64_t(8), uint64_t(16), uint64_t(24), uint64_t(64));
    const uint64_t start = 2 * size - back;  // a lap in, so the free-running counters are non-trivial
    FakeRing ring(size, start);
    Sink sink;
    IdMap ids;
    ids.add(0xabcdef, 0);
    std::vector<EventCounters> events(1);
    RingReader reader(ring.view(), &ids, events);

    Bytes s = sample(0xabcdef, 48, 9);  // 64 bytes
    Bytes l = lost_record(0xabcdef, 33);
    Bytes produced;
    REQUIRE(ring.write(s));
    REQUIRE(ring.write(l));
    put(produced, s.data(), s.size());
    put(produced, l.data(), l.size());

    DrainResult d = reader.drain(sink.pool);
    CHECK(d.bytes == s.size() + l.size());
    CHECK(d.complete);
    CHECK(ring.tail() == start + s.size() + l.size());
    sink.collect();
    REQUIRE(stream_diff(sink.stream, produced) == "");

    // The record's header and id read back from the stream as one piece.
    perf_event_header h;
    uint64_t id;
    std::memcpy(&h, sink.stream.data(), sizeof h);
    std::memcpy(&id, sink.stream.data() + 8, sizeof id);
    CHECK(h.type == PERF_RECORD_SAMPLE);
    CHECK(h.size == 64);
    CHECK(id == 0xabcdef);

    // The reader's own header walk handled the wrap too: id and lost count read across the end.
    CHECK(reader.counters().samples == 1);
    CHECK(reader.counters().lost_records == 1);
    CHECK(reader.counters().lost == 33);
    CHECK(events[0].samples == 1);
    CHECK(events[0].lost == 33);
}

TEST_CASE("RingReader: many produce/drain passes reproduce the stream exactly", "[ring]") {
    const uint64_t size = GENERATE(uint64_t(4096), uint64_t(8192));
    FakeRing ring(size);
    Sink sink;
    IdMap ids;
    ids.add(100, 0);
    ids.add(200, 1);
    std::vector<EventCounters> events(2);
    RingReader reader(ring.view(), &ids, events);

    std::mt19937_64 rng(20240601);
    Bytes produced;
    uint64_t records = 0, samples = 0, lost_records = 0, lost = 0, throttles = 0;
    uint64_t ev_samples[2] = {0, 0}, ev_lost[2] = {0, 0};
    uint64_t drains = 0;
    const uint64_t ids_pool[3] = {100, 200, 300};  // 300 is unknown to the IdMap

    for (int it = 0; it < 10000; ++it) {
        const int nrec = int(rng() % 12);
        for (int k = 0; k < nrec; ++k) {
            const uint64_t id = ids_pool[rng() % 3];
            const int ev = id == 100 ? 0 : id == 200 ? 1 : -1;
            const unsigned kind = unsigned(rng() % 16);
            Bytes r;
            if (kind == 0) r = lost_record(id, 1 + rng() % 1000);
            else if (kind == 1) r = throttle_record(id);
            else if (kind == 2) r = make_record(PERF_RECORD_MMAP2, {}, 8 * (rng() % 20), rng());
            else r = sample(id, 8 * (rng() % 128), rng());  // 16..1032 bytes
            // Sometimes the kernel writes several records before publishing head.
            if (!ring.write(r, rng() % 4 != 0)) break;  // full: the kernel drops it
            put(produced, r.data(), r.size());
            ++records;
            if (kind == 0) {
                uint64_t n;
                std::memcpy(&n, r.data() + 16, 8);
                ++lost_records;
                lost += n;
                if (ev >= 0) ev_lost[ev] += n;
            } else if (kind == 1) {
                ++throttles;
            } else if (kind >= 3) {
                ++samples;
                if (ev >= 0) ++ev_samples[ev];
            }
        }
        ring.publish();

        // Drain only some of the time, so the ring often fills and refuses records.
        if (rng() % 3 != 0) {
            const uint64_t before = ring.tail();
            const uint64_t head = ring.published();
            DrainResult d = reader.drain(sink.pool);
            ++drains;
            // Staging (128 KiB, emptied every pass) always has room for a whole ring.
            REQUIRE(d.complete);
            REQUIRE(d.bytes == head - before);
            REQUIRE(ring.tail() == head);  // released exactly what it saw
            REQUIRE(reader.tail() == head);
            sink.collect(rng() % 4 == 0);  // sometimes leave the partial buffer in place
        }
    }
    const DrainResult d = reader.drain(sink.pool);
    CHECK(d.complete);
    CHECK(ring.tail() == ring.head);
    sink.collect();

    INFO("drains " << drains << ", refused " << ring.refused << ", head " << ring.head);
    CHECK(ring.head > 1000 * size);  // many laps around the area
    CHECK(ring.refused > 0);         // the full-ring path was exercised
    CHECK(sink.stream.size() == produced.size());
    CHECK(stream_diff(sink.stream, produced) == "");
    const auto& c = reader.counters();
    CHECK(c.bytes == produced.size());
    CHECK(c.records == records);
    CHECK(c.samples == samples);
    CHECK(c.lost_records == lost_records);
    CHECK(c.lost == lost);
    CHECK(c.throttles == throttles);
    CHECK(c.bad_headers == 0);
    CHECK(c.partial_drains == 0);
    CHECK(events[0].samples == ev_samples[0]);
    CHECK(events[1].samples == ev_samples[1]);
    CHECK(events[0].lost == ev_lost[0]);
    CHECK(events[1].lost == ev_lost[1]);
}

TEST_CASE("RingReader: data_tail is released to exactly the head the reader saw", "[ring]") {
    const uint64_t size = 4096;
    FakeRing ring(size);
    Sink sink;
    RingReader reader(ring.view(), nullptr, {});
    Bytes produced;

    // Records written but not yet published are not the reader's: it stops at data_head.
    Bytes a = sample(1, 112, 1);  // 128 bytes
    Bytes b = sample(2, 240, 2);  // 256 bytes
    REQUIRE(ring.write(a));
    REQUIRE(ring.write(b, /*publish_now=*/false));
    DrainResult d = reader.drain(sink.pool);
    CHECK(d.bytes == a.size());
    CHECK(d.complete);  // complete with respect to the head it saw
    CHECK(ring.tail() == a.size());
    put(produced, a.data(), a.size());

    ring.publish();
    d = reader.drain(sink.pool);
    CHECK(d.bytes == b.size());
    CHECK(ring.tail() == a.size() + b.size());
    put(produced, b.data(), b.size());

    // Fill the ring to the brim; until the reader releases the space, the producer is refused.
    uint64_t seed = 10;
    while (ring.free_space() > 264) {
        Bytes r = sample(3, 232, seed++);  // 248 bytes: does not divide the area, so a pad is needed
        REQUIRE(ring.write(r));
        put(produced, r.data(), r.size());
    }
    Bytes pad = sample(3, ring.free_space() - 16, seed++);
    REQUIRE(ring.write(pad));
    put(produced, pad.data(), pad.size());
    CHECK_FALSE(ring.write(sample(4, 0)));

    const uint64_t seen = ring.published();
    d = reader.drain(sink.pool);
    CHECK(d.complete);
    CHECK(ring.tail() == seen);
    CHECK(reader.tail() == seen);

    // The freed space is reusable: a whole ring's worth fits again, and it reads back intact
    // (not the previous lap's bytes).
    while (ring.free_space() >= 512) {
        Bytes r = sample(5, 496, seed++);
        REQUIRE(ring.write(r));
        put(produced, r.data(), r.size());
    }
    CHECK(ring.head - ring.tail() > size - 512);
    d = reader.drain(sink.pool);
    CHECK(d.complete);
    CHECK(ring.tail() == ring.head);
    sink.collect();
    CHECK(stream_diff(sink.stream, produced) == "");
}

TEST_CASE("RingReader: staging backpressure copies only whole records and resumes", "[ring][staging]") {
    const uint64_t size = 65536;
    FakeRing ring(size, 3 * size - 200);  // records straddle the end of the ring during the test
    Sink sink(kMinBufferBytes, 4);
    RingReader reader(ring.view(), nullptr, {});

    // Occupy staging: 3 buffers being written (popped, not released), and the current one filled with
    // records up to `room` bytes from its end, while the ring will hold ~64 KiB.
    std::vector<StagingBuffer> in_flight;
    for (int i = 0; i < 3; ++i) {
        sink.pool.commit(sink.pool.writable().size());
        in_flight.push_back(sink.pool.pop_ready());
    }
    const size_t room = 3000;
    Bytes filler;
    while (filler.size() < kMinBufferBytes - room) {
        const size_t left = kMinBufferBytes - room - filler.size();
        Bytes f = sample(9, std::min<size_t>(left - 16, 1000) & ~size_t(7));
        put(filler, f.data(), f.size());
    }
    REQUIRE(filler.size() == kMinBufferBytes - room);
    {
        auto w = sink.pool.writable();
        std::memcpy(w.data(), filler.data(), filler.size());
        sink.pool.commit(filler.size());
    }

    Bytes produced;
    std::vector<uint64_t> boundaries{0};  // stream offsets where records end
    std::mt19937_64 rng(7);
    for (uint64_t seed = 0;; ++seed) {
        Bytes r = sample(1, 8 * (rng() % 64), seed);
        if (!ring.write(r)) break;
        put(produced, r.data(), r.size());
        boundaries.push_back(produced.size());
    }
    REQUIRE(produced.size() > room);
    const uint64_t start = ring.tail();

    DrainResult d1 = reader.drain(sink.pool);
    CHECK_FALSE(d1.complete);
    CHECK(d1.bytes <= room);
    CHECK(d1.bytes > 0);
    // It stopped at a record boundary, and only because the next record did not fit: the rest of the
    // buffer is padding, and no buffer is free.
    auto at = std::find(boundaries.begin(), boundaries.end(), d1.bytes);
    REQUIRE(at != boundaries.end());
    REQUIRE(at + 1 != boundaries.end());
    CHECK(*(at + 1) > room);
    CHECK(ring.tail() == start + d1.bytes);
    CHECK(reader.tail() == start + d1.bytes);
    CHECK(reader.counters().records == uint64_t(at - boundaries.begin()));
    CHECK(reader.counters().partial_drains == 1);
    CHECK(sink.pool.free_bytes() == 0);

    // Nothing was released: there is no room at all, so nothing moves.
    DrainResult d2 = reader.drain(sink.pool);
    CHECK(d2.bytes == 0);
    CHECK_FALSE(d2.complete);
    CHECK(ring.tail() == start + d1.bytes);
    CHECK(reader.counters().partial_drains == 2);

    // The writes complete: the rest fits now.
    for (auto& b : in_flight) sink.pool.release(b.index);
    DrainResult d3 = reader.drain(sink.pool);
    CHECK(d3.complete);
    CHECK(d1.bytes + d3.bytes == produced.size());
    CHECK(ring.tail() == ring.head);
    CHECK(reader.counters().records == boundaries.size() - 1);
    CHECK(reader.counters().partial_drains == 2);

    sink.collect();
    CHECK(sink.paddings >= 1);
    Bytes want = filler;
    put(want, produced.data(), produced.size());
    CHECK(stream_diff(sink.stream, want) == "");
}

TEST_CASE("RingReader: completely full staging copies nothing and releases nothing", "[ring][staging]") {
    FakeRing ring(4096);
    Sink sink(kMinBufferBytes, 4);
    std::vector<StagingBuffer> in_flight;
    while (!sink.pool.writable().empty()) {
        sink.pool.commit(sink.pool.writable().size());
        in_flight.push_back(sink.pool.pop_ready());
    }
    REQUIRE(sink.pool.free_bytes() == 0);
    REQUIRE(ring.write(sample(1)));
    RingReader reader(ring.view(), nullptr, {});
    DrainResult d = reader.drain(sink.pool);
    CHECK(d.bytes == 0);
    CHECK_FALSE(d.complete);
    CHECK(ring.tail() == 0);
    CHECK(reader.counters().records == 0);
    CHECK(reader.counters().partial_drains == 1);

    for (auto& b : in_flight) sink.pool.release(b.index);
    d = reader.drain(sink.pool);
    CHECK(d.bytes == 32);
    CHECK(d.complete);
    CHECK(reader.counters().records == 1);
}

TEST_CASE("RingReader: IdMap attributes samples and lost counts to events", "[ring]") {
    FakeRing ring(8192);
    Sink sink;
    IdMap ids;
    ids.add(100, 0);
    ids.add(200, 1);
    ids.add(300, 7);  // an index past the end of the counters span is ignored, not written
    REQUIRE(ids.find(100) == 0);
    REQUIRE(ids.find(200) == 1);
    REQUIRE(ids.find(999) == IdMap::npos);
    std::vector<EventCounters> events(2);
    RingReader reader(ring.view(), &ids, events);

    const Bytes recs[] = {
        sample(100), sample(200, 64), sample(100, 0), sample(999), sample(100, 200),
        sample(200),  sample(300),
        lost_record(100, 7), lost_record(200, 5), lost_record(999, 11), lost_record(100, 1),
        throttle_record(100),
        make_record(PERF_RECORD_COMM, {42, 42}, 16),
    };
    Bytes produced;
    for (const auto& r : recs) {
        REQUIRE(ring.write(r));
        put(produced, r.data(), r.size());
    }

    DrainResult d = reader.drain(sink.pool);
    CHECK(d.complete);
    CHECK(d.bytes == produced.size());
    sink.collect();
    CHECK(stream_diff(sink.stream, produced) == "");

    const auto& c = reader.counters();
    CHECK(c.records == std::size(recs));
    CHECK(c.samples == 7);
    CHECK(c.lost_records == 4);
    CHECK(c.lost == 7 + 5 + 11 + 1);
    CHECK(c.throttles == 1);
    CHECK(events[0].samples == 3);
    CHECK(events[0].lost == 8);
    CHECK(events[1].samples == 2);
    CHECK(events[1].lost == 5);

    SECTION("without an IdMap only the ring totals are kept") {
        FakeRing ring2(8192);
        for (const auto& r : recs) REQUIRE(ring2.write(r));
        RingReader plain(ring2.view(), nullptr, {});
        Sink sink2;
        CHECK(plain.drain(sink2.pool).complete);
        CHECK(plain.counters().samples == 7);
        CHECK(plain.counters().lost == 24);
        CHECK(plain.counters().lost_records == 4);
    }
}

TEST_CASE("RingReader: an impossible header size is counted and the drain terminates", "[ring]") {
    // Size 0 would loop forever if trusted; sizes below a header or not a multiple of 8 are as bad.
    const uint16_t bad = GENERATE(uint16_t(0), uint16_t(4), uint16_t(12));
    FakeRing ring(4096, 4096 - 16);
    Sink sink(kMinBufferBytes, 32, /*raw=*/true);  // the damage stays in the stream as it was
    RingReader reader(ring.view(), nullptr, {});
    Bytes good = sample(1, 16);
    REQUIRE(ring.write(good));
    REQUIRE(ring.write(raw_header(bad, 16)));
    REQUIRE(ring.write(sample(2, 16)));

    DrainResult d = reader.drain(sink.pool);
    CHECK(reader.counters().bad_headers == 1);
    CHECK(reader.counters().records == 1);  // the good record before it was counted
    // The reader resyncs at the head it saw: everything is consumed and released.
    CHECK(d.complete);
    CHECK(d.bytes == 32 + 16 + 32);
    CHECK(ring.tail() == ring.head);
    sink.collect();
    REQUIRE(sink.stream.size() >= good.size());
    CHECK(stream_diff(Bytes(sink.stream.begin(), sink.stream.begin() + good.size()), good) == "");

    // Later records are read normally.
    Bytes after = sample(3, 8);
    REQUIRE(ring.write(after));
    d = reader.drain(sink.pool);
    CHECK(d.complete);
    CHECK(d.bytes == after.size());
    CHECK(reader.counters().records == 2);
    CHECK(reader.counters().bad_headers == 1);
}

TEST_CASE("IdMap finds ids among many (per-task rings: one id per thread and event)", "[ring]") {
    ringcap::IdMap m;
    // Added out of order, as threads and events are opened; more than the linear-scan threshold.
    for (uint64_t i = 0; i < 200; ++i) m.add(1000 + (i * 37) % 200 * 3, size_t(i % 5));
    for (uint64_t i = 0; i < 200; ++i) CHECK(m.find(1000 + (i * 37) % 200 * 3) == size_t(i % 5));
    CHECK(m.find(999) == ringcap::IdMap::npos);
    CHECK(m.find(1001) == ringcap::IdMap::npos);
    CHECK(m.find(1000 + 200 * 3) == ringcap::IdMap::npos);
}

namespace {
// {header; id; u64 size; data[size]; u64 dyn_size}: the dump's bytes past dyn_size are what the
// kernel skipped over (here 0xAB).
Bytes stack_sample(uint64_t id, uint64_t size_field, uint64_t dump, uint64_t dyn) {
    Bytes r = make_record(PERF_RECORD_SAMPLE, {id, size_field}, dump + 8);
    std::memset(r.data() + 24, 0x11, dyn);
    std::memset(r.data() + 24 + dyn, 0xAB, dump - dyn);
    std::memcpy(r.data() + 24 + dump, &dyn, 8);
    return r;
}
// The same sample as it must come out with `keep` stack bytes and dyn_size `dyn` (an empty dump:
// size 0 and no dyn_size field).
Bytes shaped(const Bytes& rec, uint64_t keep, uint64_t dyn) {
    Bytes r(rec.begin(), rec.begin() + 16);
    put(r, &keep, 8);
    if (keep > 0) {
        Bytes data(keep, std::byte{0});
        std::memset(data.data(), 0x11, dyn);
        put(r, data.data(), data.size());
        put(r, &dyn, 8);
    }
    perf_event_header h;
    std::memcpy(&h, r.data(), sizeof h);
    h.size = uint16_t(r.size());
    std::memcpy(r.data(), &h, sizeof h);
    return r;
}
}  // namespace

TEST_CASE("RingReader: every user-stack dump is trimmed to dyn_size (rounded up to 8), fields rewritten", "[ring]") {
    constexpr uint32_t kDump = 256;
    // The end of the area falls in each part of a record in turn: header, id, size field, the used
    // and the unused stack bytes, dyn_size, and between records.
    const uint64_t before_end = GENERATE(uint64_t(8), 16, 24, 32, 100, 128, 136, 272, 280, 288, 296, 400, 600);
    FakeRing ring(8192, 8192 - before_end);
    IdMap ids;
    ids.add(1, 0);  // event 0's samples end with a dump
    ids.add(2, 1);  // event 1's do not
    std::vector<EventCounters> events(2);
    RingReader reader(ring.view(), &ids, events);
    const uint32_t dumps[2] = {kDump, 0};
    reader.set_stacks(dumps);
    const Bytes partly = stack_sample(1, kDump, kDump, 100), full = stack_sample(1, kDump, kDump, kDump),
                other = stack_sample(2, kDump, kDump, 100), shrunk = stack_sample(1, 128, 128, 50),
                empty = stack_sample(1, kDump, kDump, 0), odd = stack_sample(1, kDump, kDump, 7);
    const Bytes mmap = make_record(PERF_RECORD_MMAP2, {1, 2, 3, 4, 5, 6, 7, 8}, 16);
    for (const Bytes* r : {&partly, &full, &other, &mmap, &shrunk, &empty, &odd}) REQUIRE(ring.write(*r));
    Sink sink;
    reader.drain(sink.pool);
    sink.collect();
    Bytes want = shaped(partly, 104, 100);
    for (const Bytes* r : {&full, &other, &mmap, &shrunk}) put(want, r->data(), r->size());
    const Bytes e = shaped(empty, 0, 0), o = shaped(odd, 8, 7);
    put(want, e.data(), e.size());
    put(want, o.data(), o.size());
    CHECK(stream_diff(sink.stream, want).empty());
    CHECK(events[0].samples == 5);
    CHECK(reader.counters().samples == 6);
    CHECK(reader.counters().cut == 0);  // nothing perf could unwind from is gone
    CHECK(reader.counters().trimmed == (partly.size() + empty.size() + odd.size()) - (want.size() - full.size() -
                                           other.size() - mmap.size() - shrunk.size()));
    CHECK(ring.tail() == ring.published());
}

TEST_CASE("RingReader: under back-pressure stacks are cut, then samples dropped, never other records", "[ring]") {
    constexpr uint32_t kDump = 256;
    FakeRing ring(8192, 8192 - 136);
    IdMap ids;
    ids.add(1, 0);
    std::vector<EventCounters> events(1);
    RingReader reader(ring.view(), &ids, events);
    const uint32_t dumps[1] = {kDump};
    reader.set_stacks(dumps);
    const Bytes a = stack_sample(1, kDump, kDump, 200), b = stack_sample(1, kDump, kDump, 40),
                c = stack_sample(1, kDump, kDump, 0);
    const Bytes comm = make_record(PERF_RECORD_COMM, {7, 7}, 16), lost = lost_record(1, 3);
    Sink sink;

    reader.set_shaping(64, false);  // cut to 64 bytes: dyn_size with it
    for (const Bytes* r : {&a, &comm, &b, &c}) REQUIRE(ring.write(*r));
    reader.drain(sink.pool);
    sink.collect();
    Bytes want = shaped(a, 64, 64);
    put(want, comm.data(), comm.size());
    const Bytes bw = shaped(b, 40, 40), cw = shaped(c, 0, 0);
    put(want, bw.data(), bw.size());
    put(want, cw.data(), cw.size());
    CHECK(stream_diff(sink.stream, want).empty());
    CHECK(reader.counters().cut == 1);  // b fits whole, c is empty

    reader.set_shaping(0, true);  // drop: samples go, the COMM and LOST records stay
    for (const Bytes* r : {&a, &comm, &b, &lost}) REQUIRE(ring.write(*r));
    reader.drain(sink.pool);
    sink.collect();
    put(want, comm.data(), comm.size());
    put(want, lost.data(), lost.size());
    CHECK(stream_diff(sink.stream, want).empty());
    CHECK(reader.counters().dropped == 2);
    CHECK(reader.counters().samples == 3);
    CHECK(events[0].samples == 3);
    CHECK(events[0].dropped == 2);
    CHECK(ring.tail() == ring.published());
}

TEST_CASE("RingReader: the earliest and latest sample time (HEADER_SAMPLE_TIME), merged across rings", "[ring]") {
    // { header; id; ip; pid, tid; time; ... } as kDefaultSampleType lays a sample out.
    auto timed = [](uint64_t time) { return make_record(PERF_RECORD_SAMPLE, {100, 0x401000, 42, time, 0}); };
    FakeRing ring(8192);
    Sink sink;
    RingReader reader(ring.view(), nullptr, {});
    // Out of order within a ring (the kernel timestamps before it reserves), and a non-sample record
    // with a bigger number where a sample's time would be.
    for (uint64_t t : {5000, 3000, 9000, 7000}) REQUIRE(ring.write(timed(t)));
    REQUIRE(ring.write(make_record(PERF_RECORD_COMM, {1, 1, 0, 99999}, 0)));
    CHECK(reader.drain(sink.pool).complete);
    CHECK(reader.counters().first_time == 3000);
    CHECK(reader.counters().last_time == 9000);

    ringcap::RingCounters total, empty, other;
    other.samples = 1;
    other.first_time = other.last_time = 2000;
    total += empty;  // a ring without samples changes nothing
    total += reader.counters();
    total += empty;
    CHECK(total.first_time == 3000);
    total += other;
    CHECK(total.first_time == 2000);
    CHECK(total.last_time == 9000);
}

TEST_CASE("RingReader: executable mappings and process exits reach the observer, user-space sample pages the hit table",
          "[ring][dsos]") {
    struct Observer : ringcap::MmapObserver {
        std::vector<ringcap::MappedFile> seen;
        std::vector<uint32_t> exits;
        void on_exec_mapping(const ringcap::MappedFile& m) override { seen.push_back(m); }
        void on_process_exit(uint32_t pid) override { exits.push_back(pid); }
    } obs;
    ringcap::SampleHits hits;
    FakeRing ring(4096, 4096 - 48);  // the MMAP2 record wraps at the end of the area
    // MMAP2: pid/tid, addr, len, pgoff, maj/min, ino, ino_generation, prot/flags, then the name.
    auto mmap2 = [](uint32_t pid, uint64_t addr, uint32_t prot, const char* name, uint16_t misc) {
        ringcap::Mmap2Body b{pid, pid, addr, 0x2000, 0, 8, 1, 77, 0, prot, 2};
        const size_t n = (std::strlen(name) + 1 + 7) & ~size_t(7);
        perf_event_header h{PERF_RECORD_MMAP2, misc, uint16_t(sizeof h + sizeof b + n)};
        Bytes r;
        put(r, &h, sizeof h);
        put(r, &b, sizeof b);
        Bytes s(n, std::byte{0});
        std::memcpy(s.data(), name, std::strlen(name));
        put(r, s.data(), s.size());
        return r;
    };
    REQUIRE(ring.write(mmap2(42, 0x400000, PROT_READ | PROT_EXEC, "/usr/bin/prog", PERF_RECORD_MISC_USER)));
    REQUIRE(ring.write(mmap2(42, 0x600000, PROT_READ, "/usr/share/data", PERF_RECORD_MISC_USER)));  // not code
    REQUIRE(ring.write(mmap2(42, 0x700000, PROT_READ | PROT_EXEC, "/lib/x.so", PERF_RECORD_MISC_USER |
                                                                                 PERF_RECORD_MISC_MMAP_BUILD_ID)));
    // Samples: identifier, ip, pid/tid, time. A kernel one is not noted (the kernel is always listed).
    Bytes user = make_record(PERF_RECORD_SAMPLE, {1, 0x401234, 42 | (43ull << 32), 1000});
    Bytes kernel = make_record(PERF_RECORD_SAMPLE, {1, 0xffffffff81000000, 42 | (43ull << 32), 1001});
    perf_event_header kh;
    std::memcpy(&kh, kernel.data(), sizeof kh);
    kh.misc = PERF_RECORD_MISC_KERNEL;
    std::memcpy(kernel.data(), &kh, sizeof kh);
    REQUIRE(ring.write(user));
    REQUIRE(ring.write(kernel));
    // EXIT {pid, ppid, tid, ptid, time}: a thread's, then the process's (its main thread).
    REQUIRE(ring.write(make_record(PERF_RECORD_EXIT, {42 | (1ull << 32), 43 | (42ull << 32), 5})));
    REQUIRE(ring.write(make_record(PERF_RECORD_EXIT, {42 | (1ull << 32), 42 | (1ull << 32), 6})));
    RingReader reader(ring.view(), nullptr, {}, &obs, &hits);
    Sink sink;
    reader.drain(sink.pool);
    REQUIRE(obs.seen.size() == 2);
    CHECK(obs.seen[0].pid == 42);
    CHECK(obs.seen[0].start == 0x400000);
    CHECK(obs.seen[0].end == 0x402000);
    CHECK((obs.seen[0].maj == 8 && obs.seen[0].min == 1 && obs.seen[0].ino == 77 && obs.seen[0].has_inode));
    CHECK(obs.seen[0].path == "/usr/bin/prog");
    CHECK(obs.seen[1].path == "/lib/x.so");
    CHECK_FALSE(obs.seen[1].has_inode);  // a build-id MMAP2 carries no device and inode
    std::vector<std::pair<uint32_t, uint64_t>> pages;
    hits.take([&](uint32_t pid, uint64_t page) { pages.emplace_back(pid, page); });
    CHECK(pages == std::vector<std::pair<uint32_t, uint64_t>>{{42, 0x401000}});
    CHECK(obs.exits == std::vector<uint32_t>{42});
}

TEST_CASE("RingReader: after a lower frequency, hrtimer samples say their new period from where it began", "[ring]") {
    // { header; id; ip; pid/tid; time; cpu; period } as kDefaultSampleType lays a sample out.
    auto sample_with_period = [](uint64_t id, uint64_t period) {
        return make_record(PERF_RECORD_SAMPLE, {id, 0x401000, 7, 1000, 0, period});
    };
    FakeRing ring(4096, 4096 - 24);  // records wrap
    IdMap ids;
    ids.add(1, 0);  // cpu-clock: the kernel keeps reporting its first period
    ids.add(2, 1);  // another event that reports its own
    std::vector<EventCounters> events(2);
    RingReader reader(ring.view(), &ids, events);
    const uint64_t bases[2] = {100000, 0};
    reader.set_period_bases(bases);
    const Bytes before = sample_with_period(1, 100000), other = sample_with_period(2, 5);
    REQUIRE(ring.write(before));
    reader.change_period(ring.published(), 2);  // from here on every 400 us
    REQUIRE(ring.write(sample_with_period(1, 100000)));
    REQUIRE(ring.write(other));
    Sink sink;
    reader.drain(sink.pool);
    reader.change_period(ring.published(), 0);  // back to the normal rate
    REQUIRE(ring.write(sample_with_period(1, 100000)));
    reader.drain(sink.pool);
    sink.collect();
    Bytes want = before;
    const Bytes after = sample_with_period(1, 400000), normal = sample_with_period(1, 100000);
    put(want, after.data(), after.size());
    put(want, other.data(), other.size());
    put(want, normal.data(), normal.size());
    CHECK(stream_diff(sink.stream, want).empty());
}
