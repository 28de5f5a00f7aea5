// When the record's main thread wakes: each state of the session, its deadline (or none).
#include <catch2/catch.hpp>

#include "ringcap/main_wake.hpp"

using namespace ringcap;
using namespace std::chrono_literals;

namespace {
const MainWake::Time t0 = MainWake::Time{} + 1000s;

// An idle system-wide capture just after a round: no new data, nothing pending.
MainWake idle() {
    MainWake w;
    w.now = t0;
    w.last_round = t0 - 10ms;
    return w;
}
}  // namespace

TEST_CASE("main wake: an idle per-task capture waits for an event only", "[wake]") {
    const MainWake w = idle();
    CHECK_FALSE(w.next());
    CHECK(w.timeout_ms() == -1);
}

TEST_CASE("main wake: new data is rounded once the spacing since the last round passed", "[wake]") {
    MainWake w = idle();
    w.new_bytes = 4096;  // a little: an idle capture's flush
    CHECK(w.timeout_ms() == 4990);  // 5 s after the last marker
    w.new_bytes = 1 << 20;  // a buffer's worth
    CHECK(w.timeout_ms() == 40);  // 50 ms after the last marker
    w.last_round = t0 - 2s;  // long ago (an idle capture's first data): at once
    CHECK(w.timeout_ms() == 0);
    // Pending: the acknowledgements are events, new data or not.
    w.round_pending = true;
    CHECK(w.timeout_ms() == -1);
}

TEST_CASE("main wake: when the collectors' quiet tick rides on the rounds, one is due every quiet period", "[wake]") {
    MainWake w = idle();
    w.rounds_tick = true;  // no new data seen: the round's flush is what brings it
    CHECK(w.timeout_ms() == 4990);
    w.quiet_spacing = 1s;  // a flight recorder's window
    CHECK(w.timeout_ms() == 990);
    w.new_bytes = 1 << 20;  // busy: the usual spacing
    CHECK(w.timeout_ms() == 40);
    w.round_pending = true;  // its acknowledgements are events
    CHECK(w.timeout_ms() == -1);
}

TEST_CASE("main wake: quiet rounds come when about kQuietRisk came, 5 s apart at least, 30 s at most", "[wake]") {
    CHECK(MainWake::quiet_spacing_for(0) == MainWake::kQuietSpacing);  // not measured yet
    CHECK(MainWake::quiet_spacing_for(8192) == 30s);                      // idle, -a -F 100 on 2 CPUs: 32 s
    CHECK(MainWake::quiet_spacing_for(26214.4) == 10s);                   // 256 KiB in 10 s
    CHECK(MainWake::quiet_spacing_for(60000) == 5s);                      // -F 99 -g on busy CPUs: 4.4 s
    CHECK(MainWake::quiet_spacing_for(1e9) == 5s);
}

TEST_CASE("main wake: the hotplug check and the status line are deadlines of their own", "[wake]") {
    MainWake w = idle();
    w.hotplug_due = t0 + 700ms;
    CHECK(w.timeout_ms() == 700);
    w.status_due = t0 + 300ms;
    CHECK(w.timeout_ms() == 300);
    w.status_due = t0 - 5ms;  // late already
    CHECK(w.timeout_ms() == 0);
}

TEST_CASE("main wake: --duration, --switch-output=TIME and a lagging header are deadlines", "[wake]") {
    MainWake w = idle();
    w.duration_end = t0 + 2500ms;
    CHECK(w.timeout_ms() == 2500);
    w.switch_due = t0 + 1200ms;
    CHECK(w.timeout_ms() == 1200);
    w.header_due = t0 + 999us;  // rounded up: due when it wakes, not a spin of 0 ms timeouts
    CHECK(w.timeout_ms() == 1);
}

TEST_CASE("main wake: a rotation under way or a pipe polls, the earliest deadline still wins", "[wake]") {
    MainWake w = idle();
    w.polling = true;
    CHECK(w.timeout_ms() == 100);
    w.new_bytes = 8 << 20;
    CHECK(w.timeout_ms() == 40);
}

TEST_CASE("main wake: a far deadline fits poll(2)'s int", "[wake]") {
    MainWake w = idle();
    w.duration_end = t0 + std::chrono::hours(24 * 365 * 100);
    CHECK(w.timeout_ms() == INT32_MAX);
}
