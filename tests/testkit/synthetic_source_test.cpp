// The test kit's synthetic source: rings in ordinary memory that producer threads fill like the
// kernel. Drained here by the real RingReader; the file it leads to is checked by perf in tests/record.
#include <catch2/catch.hpp>

#include <cstring>
#include <poll.h>
#include <vector>

#include "ringcap/ring.hpp"
#include "ringcap/staging.hpp"
#include "testkit/synthetic_source.hpp"

using namespace ringcap;

namespace {

struct Drainer {
    std::span<SourceRing> rings;
    IdMap ids;
    std::vector<EventCounters> events{1};
    std::vector<RingReader> readers;
    StagingPool pool{1u << 20, 4};

    explicit Drainer(std::span<SourceRing> r) : rings(r) {
        for (const auto& c : rings) ids.add(c.events.front().id, 0);
        for (const auto& c : rings) readers.emplace_back(c.ring.view(), &ids, events);
    }
    void pass() {
        for (auto& rd : readers) {
            const DrainResult d = rd.drain(pool);
            REQUIRE(rd.counters().bad_headers == 0);
            (void)d;
            // Recycle staging as a completed write would.
            while (pool.has_ready()) pool.release(pool.pop_ready().index);
            if (auto p = pool.take_partial()) pool.release(p->index);
        }
    }
    uint64_t samples() const {
        uint64_t n = 0;
        for (const auto& rd : readers) n += rd.counters().samples;
        return n;
    }
    uint64_t lost_in_records() const {
        uint64_t n = 0;
        for (const auto& rd : readers) n += rd.counters().lost;
        return n;
    }
};

}  // namespace

TEST_CASE("synthetic rings have a perf ring's layout, every sample written is drained", "[synthetic]") {
    SyntheticConfig cfg;
    cfg.rings = 3;
    cfg.threads = 2;      // rings 0 and 2 on one producer, ring 1 on the other
    cfg.mb_per_ring = 0;  // saturate: write whenever there is room, never drop
    cfg.record_bytes = 1000;  // rounded down to whole u64s: 1000 is already
    SamplingConfig sampling;
    const perf_event_attr attr = synthetic_attr(cfg, sampling);
    CHECK((attr.sample_type & PERF_SAMPLE_IDENTIFIER));
    CHECK(attr.sample_stack_user == 1000 - 80);

    SyntheticSource src(cfg, 100);
    CHECK(src.ring_count() == 3);
    CHECK_FALSE(src.level_triggered_ok());  // eventfds: io_uring only
    std::vector<perf_event_attr> attrs{attr};
    src.open(attrs, 4);
    Drainer d(src.rings());
    REQUIRE(d.rings.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
        const RingView v = d.rings[i].ring.view();
        CHECK(v.size == 4 * page_size());
        CHECK(v.data == reinterpret_cast<std::byte*>(v.page) + page_size());
        CHECK(d.rings[i].events.front().id == 100 + i);
    }
    src.enable();
    // Drain until each ring has wrapped many times (16 KiB rings, 1000-byte samples).
    auto all_wrapped = [&] {
        for (const auto& rd : d.readers)
            if (rd.counters().samples < 1000) return false;
        return true;
    };
    while (!all_wrapped()) d.pass();
    // The producer signalled its eventfd (the "owner fd" the collector polls) at the watermark.
    pollfd p{d.rings[0].owner_fd(), POLLIN, 0};
    CHECK(::poll(&p, 1, 0) == 1);
    src.disable();
    d.pass();
    CHECK(d.samples() == src.written());
    CHECK(src.dropped() == 0);
    CHECK(d.events[0].samples == src.written());
    CHECK(src.lost_counts().empty());
}

TEST_CASE("synthetic rings drop like the kernel when full: counted, then reported by PERF_RECORD_LOST",
          "[synthetic]") {
    SyntheticConfig cfg;
    cfg.rings = 1;
    cfg.mb_per_ring = 200;  // 200 MB/s into a 16 KiB ring that nobody drains yet
    cfg.record_bytes = 4096;
    SamplingConfig sampling;
    SyntheticSource src(cfg, 7);
    std::vector<perf_event_attr> attrs{synthetic_attr(cfg, sampling)};
    src.open(attrs, 4);
    Drainer d(src.rings());
    src.enable();
    while (src.dropped() == 0) {
    }  // the ring filled and a due sample found no room
    // Room again: the next record the producer writes is the LOST record for those drops.
    while (d.readers[0].counters().lost_records == 0) d.pass();
    src.disable();
    d.pass();
    CHECK(d.samples() == src.written());
    CHECK(d.lost_in_records() > 0);
    // The drops a LOST record did not report yet are in the per-event count (LOST_SAMPLES at the end).
    CHECK(d.lost_in_records() <= src.dropped());
    auto lost = src.lost_counts();
    REQUIRE(lost.size() == 1);
    CHECK(lost[0].id == 7);
    CHECK(lost[0].lost == src.dropped());
    CHECK(src.offered() == src.written() + src.dropped());
}
