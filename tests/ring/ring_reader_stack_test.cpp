// RingReader's user-stack dumps (fake_ring.hpp): trimmed to dyn_size, and cut under back-pressure.
#include <catch2/catch.hpp>

#include "fake_ring.hpp"

using namespace ring_fake;

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

TEST_CASE("RingReader: under back-pressure stacks are cut, never other records, and samples with room are not dropped", "[ring]") {
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

    // Dropping: only samples that find no room in staging (ring_reader_staging_test.cpp); with
    // room, cut as the grade says and copied.
    reader.set_shaping(64, true);
    for (const Bytes* r : {&a, &comm, &b, &lost}) REQUIRE(ring.write(*r));
    reader.drain(sink.pool);
    sink.collect();
    const Bytes aw = shaped(a, 64, 64);
    for (const Bytes* w : {&aw, &comm, &bw, &lost}) put(want, w->data(), w->size());
    CHECK(stream_diff(sink.stream, want).empty());
    CHECK(reader.counters().dropped == 0);
    CHECK(reader.counters().cut == 2);
    CHECK(reader.counters().samples == 5);
    CHECK(events[0].samples == 5);
    CHECK(ring.tail() == ring.published());
}
