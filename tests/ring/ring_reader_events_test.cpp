// What RingReader learns from the records it copies (fake_ring.hpp): samples and lost counts per
// event, bad headers, sample times, mappings and exits for the observer, periods after a frequency
// change.
#include <catch2/catch.hpp>

#include "fake_ring.hpp"

using namespace ring_fake;

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
