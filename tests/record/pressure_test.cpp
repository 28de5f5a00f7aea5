// The back-pressure grades without the kernel: headroom in, grade out, over a fake clock.
#include <catch2/catch.hpp>

#include "ringcap/pressure.hpp"

using namespace ringcap;
using namespace std::chrono_literals;

namespace {
PressureConfig dwarf_z() {
    PressureConfig c;
    c.zstd_level = 1;
    c.stack_dump = 8192;
    return c;
}
// Headroom just below grade k's level, and just above grade k's release.
double below(const PressureGrader& g, size_t k) { return g.threshold(k) - 0.005; }
double above_release(const PressureGrader& g, size_t k) { return g.threshold(k) + PressureGrader::kMargin + 0.01; }
}  // namespace

TEST_CASE("pressure: the ladder, mildest first: a faster zstd level, shorter stacks, a lower frequency", "[pressure]") {
    PressureGrader g(dwarf_z());
    REQUIRE(g.levels() == 9);
    CHECK(g.describe(0) == "normal");
    CHECK(g.describe(1) == "zstd -1");
    CHECK(g.describe(2) == "zstd -5");
    CHECK(g.describe(3) == "zstd -5, stacks cut to 4096 bytes");
    CHECK(g.describe(5) == "zstd -5, stacks cut to 1024 bytes");
    CHECK(g.describe(8) == "zstd -5, stacks cut to 1024 bytes, frequency / 8");
    for (size_t k = 2; k < g.levels(); ++k) CHECK(g.threshold(k) < g.threshold(k - 1));
    // Only when staging is mostly taken: a disk that keeps up uses a good part of it for writes in flight.
    CHECK(g.threshold(1) <= 0.25);
    CHECK(g.threshold(8) > PressureGrader::kDropBelow);
    // The longer cuts shape only a ring that is filling; the shortest one, and the lower
    // frequencies after it, every sample.
    for (size_t k = 0; k < g.levels(); ++k) {
        INFO("level " << k << ": " << g.describe(k));
        CHECK(g.grade_at(k).cut_all == (k >= 5));
    }

    PressureConfig plain;  // no -z, no dwarf: only the frequency
    PressureGrader p(plain);
    CHECK(p.levels() == 4);
    CHECK(p.describe(1) == "frequency / 2");
    PressureConfig nocut = dwarf_z();
    nocut.cut = false;  // --no-cut-samples
    nocut.zstd_level = 0;
    PressureGrader n(nocut);
    CHECK(n.levels() == 4);
    for (size_t k = 0; k < n.levels(); ++k) CHECK_FALSE(n.grade_at(k).cut_all);
    PressureConfig small = dwarf_z();
    small.stack_dump = 2048;  // only cuts shorter than the dump
    CHECK(PressureGrader(small).levels() == 9 - 2);
}

TEST_CASE("pressure: grades engage as headroom falls, a lower frequency only when it stays low", "[pressure]") {
    PressureGrader g(dwarf_z());
    auto t = PressureGrader::Clock::time_point{} + 100s;
    CHECK_FALSE(g.update(0.9, t));
    CHECK(g.level() == 0);
    CHECK(g.update(below(g, 1), t));  // the first grade at once
    CHECK(g.level() == 1);
    CHECK(g.grade().zstd_level == -1);
    // Lower: every grade below which headroom is, in one update, up to the first frequency step
    // (one pass can take an eighth of staging: a grade per pass comes too late).
    CHECK(g.update(below(g, 6), t += 1ms));
    CHECK(g.level() == 5);
    CHECK(g.engaged()[2] == 1);
    CHECK(g.engaged()[4] == 1);
    for (int i = 0; i < 10; ++i) g.update(below(g, 6), t += 1ms);
    CHECK(g.level() == 5);
    CHECK(g.grade().cut_bytes == 1024);
    CHECK(g.grade().rate_shift == 0);
    g.update(below(g, 6), t += 100ms);
    CHECK(g.level() == 5);  // not yet: a burst does not change the sampling
    g.update(below(g, 6), t += 450ms);
    CHECK(g.level() == 6);
    CHECK(g.grade().rate_shift == 1);
    g.update(0.9, t += 10ms);  // relief resets the wait
    g.update(below(g, 7), t += 10ms);
    g.update(below(g, 7), t += 400ms);
    CHECK(g.level() == 6);
    CHECK_FALSE(g.grade().drop);
    CHECK(g.worst() == 6);
    CHECK(g.engaged()[1] == 1);
}

TEST_CASE("pressure: dropping stops as soon as there is room, grades are undone one at a time once headroom stays high",
          "[pressure]") {
    PressureGrader g(dwarf_z());
    auto t = PressureGrader::Clock::time_point{} + 100s;
    for (int i = 0; i < 5; ++i) g.update(below(g, 4), t += 1ms);
    REQUIRE(g.level() == 4);
    CHECK(g.grade().cut_bytes == 2048);
    CHECK(g.update(0.01, t += 1ms));  // almost no room: samples go, whatever else is engaged
    CHECK(g.grade().drop);
    CHECK(g.level() == 5);  // and the next grade, as for any fall
    CHECK(g.drops_engaged() == 1);
    g.update(PressureGrader::kDropUntil - 0.01, t += 1ms);
    CHECK(g.grade().drop);  // until there is room again
    // Room again: the drops stop at once, the grades are undone after a second.
    g.update(0.9, t += 1ms);
    CHECK_FALSE(g.grade().drop);
    g.update(0.9, t += 900ms);
    CHECK(g.level() == 5);
    g.update(0.9, t += 200ms);
    CHECK(g.level() == 4);
    // One grade per second after that, in reverse order.
    g.update(0.9, t += 500ms);
    CHECK(g.level() == 4);
    g.update(0.9, t += 600ms);
    CHECK(g.level() == 3);
    for (int i = 0; i < 3; ++i) g.update(0.9, t += 1100ms);
    CHECK(g.level() == 0);
    CHECK(g.grade() == Grade{1, 0, 0, false});
    // A dip in between restarts the wait.
    g.update(below(g, 1), t += 1ms);
    REQUIRE(g.level() == 1);
    g.update(0.9, t += 800ms);
    g.update(above_release(g, 1) - 0.02, t += 100ms);  // not above the level plus the margin
    g.update(0.9, t += 300ms);
    CHECK(g.level() == 1);
}

TEST_CASE("pressure: a grade that comes back soon after it was undone waits twice as long to be undone again",
          "[pressure]") {
    PressureGrader g(dwarf_z());
    auto t = PressureGrader::Clock::time_point{} + 100s;
    g.update(below(g, 1), t += 1ms);
    REQUIRE(g.level() == 1);
    CHECK(g.release_after(1) == PressureGrader::kRelease);
    // Undone after kRelease of room, then needed again at once: the next wait is 2 s.
    g.update(0.9, t += 1ms);
    g.update(0.9, t += 1001ms);
    REQUIRE(g.level() == 0);
    g.update(below(g, 1), t += 500ms);
    REQUIRE(g.level() == 1);
    CHECK(g.release_after(1) == 2 * PressureGrader::kRelease);
    g.update(0.9, t += 1ms);
    g.update(0.9, t += 1500ms);
    CHECK(g.level() == 1);  // a second of room is no longer enough
    g.update(0.9, t += 600ms);
    REQUIRE(g.level() == 0);
    // Each flap doubles it, up to kMaxRelease.
    for (int i = 0; i < 6; ++i) {
        g.update(below(g, 1), t += 1ms);
        g.update(0.9, t += 1ms);
        g.update(0.9, t += PressureGrader::kMaxRelease + 1ms);
        REQUIRE(g.level() == 0);
    }
    g.update(below(g, 1), t += 1ms);
    CHECK(g.release_after(1) == PressureGrader::kMaxRelease);
    // Needed again only after a calm stretch: the usual wait.
    g.update(0.9, t += 1ms);
    g.update(0.9, t += PressureGrader::kMaxRelease + 1ms);
    REQUIRE(g.level() == 0);
    g.update(0.9, t += PressureGrader::kFlapWindow + 1s);
    g.update(below(g, 1), t += 1ms);
    REQUIRE(g.level() == 1);
    CHECK(g.release_after(1) == PressureGrader::kRelease);
}
