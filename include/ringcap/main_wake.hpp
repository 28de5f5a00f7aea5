// When the record's main thread wakes (src/record/session_loop.cpp): at the earliest of its real
// deadlines, and otherwise only for an event (a signal, the command's exit, a collector's round
// acknowledgement or end, the data section growing: all on fds it polls). Pure, so that each state
// is tested without a session (tests/record/main_wake_test.cpp).
//
// What does wake it, on an idle `-a -F 100` capture: the round, every quiet_spacing_for() (30 s:
// the collectors' quiet tick rides on it, their flush and acknowledgement, then one header
// refresh); a full staging buffer's write; a CPU going on- or offline (a uevent). A state whose
// progress nothing signals (a rotation under way, -o -) polls.
#pragma once

#include <chrono>
#include <optional>

namespace ringcap {

struct MainWake {
    using Clock = std::chrono::steady_clock;
    using Time = Clock::time_point;

    // Readers hold about two rounds in memory (README, Compatibility). Measured at 150 MB/s: 100 ms
    // rounds cost hotspot's parser a 30 MB buffer, 50 ms ones 17 MB for no CPU we could measure;
    // 20 ms cost 15-25 % more collector CPU (a flush and a marker per round).
    static constexpr auto kRoundSpacing = std::chrono::milliseconds(50);
    // Below kQuietBytes of new data a round waits kQuietSpacing (or quiet_spacing_for()): what a
    // reader holds stays as small, and an idle capture wakes for a round every few seconds, not at
    // each 1 s flush.
    static constexpr uint64_t kQuietBytes = 1ull << 20;
    static constexpr auto kQuietSpacing = std::chrono::seconds(5);
    // When the collectors' quiet tick rides on the rounds (their flush is the round's), the rounds
    // are what a crash loses: about kQuietRisk of data, kQuietSpacing apart at least and
    // kQuietLongest at most. An idle machine's capture (-a -F 100: 4 KiB a second a CPU) then
    // wakes its threads and the disk every 30 s, a busier one (-F 99 -g on busy CPUs) every 5 s.
    static constexpr uint64_t kQuietRisk = 256u << 10;
    static constexpr auto kQuietLongest = std::chrono::seconds(30);
    // The spacing for data coming at `bytes_per_second` (measured over the last round; 0: not yet).
    static Clock::duration quiet_spacing_for(double bytes_per_second);
    // Progress that nothing signals is looked at this often.
    static constexpr auto kPoll = std::chrono::milliseconds(100);
    // CPU hotplug: checked on any wake-up kHotplugEvery after the last check, and at the latest
    // kHotplugLatest after it (an idle capture's wake-ups then carry it).
    static constexpr auto kHotplugEvery = std::chrono::milliseconds(500);
    static constexpr auto kHotplugLatest = std::chrono::milliseconds(1000);
    // With the kernel's uevents (hotplug.hpp: CpuUevents) a change is an event; the check is only
    // for a namespace that gets none, and rides on the rounds of an idle capture.
    static constexpr auto kHotplugUevents = kQuietLongest;
    // The crash-safe header lags the data on disk at most this long (it is refreshed on the wake-ups
    // rounds bring at most every 250 ms, file_output.hpp; this is for the last data before a lull).
    static constexpr auto kHeaderLatest = std::chrono::milliseconds(1000);

    Time now{};
    bool round_pending = false;  // requested, not yet acknowledged by every collector (an event will say)
    uint64_t new_bytes = 0;      // what the data grew by since the last round was requested
    Time last_round{};           // when the last round's marker was written
    // A round is due every quiet_spacing even without new data: the collectors' quiet tick rides on
    // the rounds (their flush for it is what brings the data), or a flight recorder under
    // --max-size needs its markers that close (Session::rounds_by_time()).
    bool rounds_tick = false;
    Clock::duration quiet_spacing = kQuietSpacing;  // shorter for a flight recorder's window (its granularity)
    std::optional<Time> duration_end;  // --duration
    std::optional<Time> status_due;    // the live status line
    std::optional<Time> hotplug_due;   // system-wide: the latest hotplug check
    std::optional<Time> header_due;    // data on disk (or on its way) that the header does not cover yet
    std::optional<Time> switch_due;    // --switch-output=TIME
    bool polling = false;              // a state whose progress no event signals

    // The next deadline, or none: then only an event wakes the thread.
    std::optional<Time> next() const;
    // For poll(2): milliseconds until next() rounded up (so that it is due on waking), -1 for none,
    // 0 when it is due already.
    int timeout_ms() const;
};

}  // namespace ringcap
