// What an idle capture wakes for: the collectors' quiet tick and the hotplug uevents that replace
// reading the online CPUs every second (the wake-ups themselves are measured by bench/idle.sh).
#include <catch2/catch.hpp>

#include <string>

#include "ringcap/collector.hpp"
#include "ringcap/hotplug.hpp"

using namespace ringcap;

TEST_CASE("collector tick: quiet while less than kQuietTickRate a second is drained, else every second", "[wake]") {
    // 1 s ticks: 64 KiB a second is the boundary.
    CHECK(next_tick_seconds(1.0, 5.0, 1.0, 0) == 5.0);
    CHECK(next_tick_seconds(1.0, 5.0, 1.0, kQuietTickRate - 1) == 5.0);
    CHECK(next_tick_seconds(1.0, 5.0, 1.0, kQuietTickRate) == 1.0);
    // A 5 s quiet tick judges the rate over its 5 s: what 1 s would have taken stays quiet.
    CHECK(next_tick_seconds(1.0, 5.0, 5.0, 4 * kQuietTickRate) == 5.0);
    CHECK(next_tick_seconds(1.0, 5.0, 5.0, 5 * kQuietTickRate) == 1.0);
    // Off (the status line, a flight recorder), or no longer than the base: always the base.
    CHECK(next_tick_seconds(1.0, 0.0, 1.0, 0) == 1.0);
    CHECK(next_tick_seconds(1.0, 0.5, 1.0, 0) == 1.0);
}

TEST_CASE("hotplug uevents: a CPU's online, offline, add and remove, nothing else", "[wake]") {
    using namespace std::string_literals;
    CHECK(CpuUevents::about_cpu("online@/devices/system/cpu/cpu1\0ACTION=online\0DEVPATH=/devices/system/cpu/cpu1\0"s));
    CHECK(CpuUevents::about_cpu("offline@/devices/system/cpu/cpu63\0ACTION=offline\0"s));
    CHECK(CpuUevents::about_cpu("add@/devices/system/cpu/cpu2"));
    CHECK(CpuUevents::about_cpu("remove@/devices/system/cpu/cpu2"));
    // The cpuid driver's devices, a CPU's subdirectories, other devices, libudev's own messages.
    CHECK_FALSE(CpuUevents::about_cpu("add@/devices/virtual/cpuid/cpu1"));
    CHECK_FALSE(CpuUevents::about_cpu("change@/devices/system/cpu/cpu1"));
    CHECK_FALSE(CpuUevents::about_cpu("add@/devices/system/cpu/cpu1/cache/index0"));
    CHECK_FALSE(CpuUevents::about_cpu("online@/devices/system/cpu/cpufreq"));
    CHECK_FALSE(CpuUevents::about_cpu("online@/devices/system/cpu/cpu"));
    CHECK_FALSE(CpuUevents::about_cpu("add@/devices/virtual/net/veth0"));
    CHECK_FALSE(CpuUevents::about_cpu("libudev\0\xfe\xed\xca\xfe"s));
    CHECK_FALSE(CpuUevents::about_cpu(""));
}
