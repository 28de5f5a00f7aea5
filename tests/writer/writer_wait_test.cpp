// The writer's own waits (settle_allocation, wait_idle) run the collector's loop: nothing else
// that loop reports may be lost meanwhile. With io_uring a multishot poll reports a hang-up once, so
// a POLLHUP thrown away there would leave a per-task record waiting for an fd that never ends.
#include <catch2/catch.hpp>

#include <deque>
#include <poll.h>

#include "ringcap/file_space.hpp"
#include "ringcap/loop.hpp"
#include "ringcap/output_file.hpp"
#include "ringcap/staging.hpp"
#include "ringcap/writer.hpp"
#include "tools.hpp"

using namespace ringcap;

namespace {

// A loop whose events the test scripts: ring events first, then one completion per run_once
// (writes complete whole, fallocates succeed).
struct ScriptedLoop final : Loop {
    std::deque<std::tuple<uint32_t, uint32_t, int>> ring_events;
    std::deque<std::pair<uint32_t, int>> completions;
    const char* name() const override { return "scripted"; }
    std::string describe() const override { return ""; }
    void watch_ring(uint32_t, uint32_t, int, const RingBuffer&) override {}
    void unwatch_ring(uint32_t, uint32_t, int) override {}
    void watch_source(Source, int) override {}
    void set_timer(double) override {}
    void set_tick(double) override {}
    void restart_tick(double) override {}
    void attach_output(std::span<const int>, std::span<const iovec>) override {}
    void update_output(unsigned, std::span<const int>) override {}
    void write(uint32_t slot, unsigned, const std::byte*, uint32_t len, uint64_t) override {
        completions.emplace_back(slot, int(len));
    }
    void fallocate(uint32_t slot, unsigned, uint64_t, uint64_t) override { completions.emplace_back(slot, 0); }
    void run_once(LoopHandler& h, bool) override {
        ++stats_.waits;
        while (!ring_events.empty()) {
            auto [ring, which, revents] = ring_events.front();
            ring_events.pop_front();
            h.on_ring(ring, which, revents);
        }
        if (completions.empty()) return;
        auto [slot, res] = completions.front();
        completions.pop_front();
        h.on_write(slot, res);
    }
};

struct Hangups final : LoopHandler {
    int pollhup = 0, data = 0;
    void on_ring(uint32_t, uint32_t, int revents) override { ++(revents & POLLHUP ? pollhup : data); }
    void on_write(uint32_t, int) override {}
    void on_source(Source) override {}
};

struct Rig {
    TempFile tmp{"writer-wait"};
    ScriptedLoop loop;
    OutputFile file = OutputFile::create(tmp.path, /*allow_direct=*/false);
    StagingPool pool{64 << 10, 4};
    FileSpace space{kStagingAlign, /*preallocate=*/true};
    Writer writer{loop, file, pool, space};

    // One full buffer queued: the writer's first one starts an allocation and waits for it.
    void queue_one() {
        auto w = pool.writable();
        REQUIRE(w.size() == 64u << 10);
        pool.commit(w.size());
        writer.queue_ready();
    }
};

}  // namespace

TEST_CASE("a ring's hang-up while the writer waits for its allocation reaches the collector", "[writer][space]") {
    Rig r;
    r.queue_one();
    REQUIRE_FALSE(r.loop.completions.empty());  // the fallocate is in flight
    r.loop.ring_events.emplace_back(0, 0, POLLHUP);
    r.loop.ring_events.emplace_back(1, 0, POLLIN);
    Hangups h;
    r.writer.settle_allocation(&h);
    CHECK(h.pollhup == 1);
    CHECK(h.data == 1);
}

TEST_CASE("a ring's hang-up while the writer waits for its writes to end reaches the collector", "[writer]") {
    Rig r;
    r.queue_one();
    r.loop.ring_events.emplace_back(0, 1, POLLHUP);
    Hangups h;
    r.writer.wait_idle(&h);
    CHECK(r.writer.in_flight() == 0);
    CHECK(h.pollhup == 1);
}
