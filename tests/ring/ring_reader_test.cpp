// RingReader over fake memory (fake_ring.hpp): the staging stream the reader produces must be
// exactly the records produced, byte for byte, in order.
#include <catch2/catch.hpp>

#include "fake_ring.hpp"

using namespace ring_fake;

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
