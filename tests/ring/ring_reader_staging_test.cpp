// RingReader when staging is short (fake_ring.hpp): only whole records are copied, and only what was
// copied is released to the kernel.
#include <catch2/catch.hpp>

#include "fake_ring.hpp"

using namespace ring_fake;

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
    uint32_t filler_samples = 0;
    while (filler.size() < kMinBufferBytes - room) {
        const size_t left = kMinBufferBytes - room - filler.size();
        Bytes f = sample(9, std::min<size_t>(left - 16, 1000) & ~size_t(7));
        put(filler, f.data(), f.size());
        ++filler_samples;
    }
    REQUIRE(filler.size() == kMinBufferBytes - room);
    {
        auto w = sink.pool.writable();
        std::memcpy(w.data(), filler.data(), filler.size());
        sink.pool.commit(filler.size(), filler_samples);
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

TEST_CASE("RingReader: samples dropped under back-pressure need no staging, a record of another kind waits for it",
          "[ring][staging]") {
    FakeRing ring(4096);
    Sink sink(kMinBufferBytes, 4);
    std::vector<StagingBuffer> in_flight;
    while (!sink.pool.writable().empty()) {
        sink.pool.commit(sink.pool.writable().size());
        in_flight.push_back(sink.pool.pop_ready());
    }
    IdMap ids;
    ids.add(1, 0);
    std::vector<EventCounters> events(1);
    RingReader reader(ring.view(), &ids, events);
    reader.set_shaping(0, true);
    const Bytes s = sample(1), comm = make_record(PERF_RECORD_COMM, {7, 7}, 16);
    for (const Bytes* r : {&s, &s, &comm, &s}) REQUIRE(ring.write(*r));
    // No staging at all: the two samples at the tail leave the ring, the COMM stays and holds the rest.
    DrainResult d = reader.drain(sink.pool);
    CHECK_FALSE(d.complete);
    CHECK(d.bytes == 2 * s.size());
    CHECK(ring.tail() == 2 * s.size());
    CHECK(reader.counters().dropped == 2);
    CHECK(reader.counters().samples == 0);
    CHECK(events[0].dropped == 2);
    CHECK(sink.pool.free_bytes() == 0);
    // Room again: the COMM and the sample after it are copied (staging takes them).
    for (auto& b : in_flight) sink.pool.release(b.index);
    d = reader.drain(sink.pool);
    CHECK(d.complete);
    sink.collect();
    Bytes want = comm;
    put(want, s.data(), s.size());
    CHECK(stream_diff(sink.stream, want).empty());
    CHECK(reader.counters().dropped == 2);
    CHECK(reader.counters().records == 2);
    CHECK(ring.tail() == ring.published());
}
