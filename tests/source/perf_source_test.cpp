// The perf ring source: targets from the options, what it will need, and (with the kernel) what
// reopening a ring keeps of the events it replaces.
#include <catch2/catch.hpp>

#include <algorithm>
#include <unistd.h>

#include "ringcap/perf_source.hpp"
#include "record/spawn.hpp"
#include "support.hpp"

using namespace ringcap;

TEST_CASE("PerfTarget: -a is every online CPU, system-wide, -C must name online CPUs", "[source]") {
    const PerfTarget all = PerfTarget::from_options(parse_record_args({"-a"}));
    CHECK(all.cpus == online_cpus());
    CHECK(all.tids.empty());
    CHECK_FALSE(all.per_task);
    CHECK_FALSE(all.at_exec);
    CHECK(PerfTarget::from_options(parse_record_args({"-C", "0"})).cpus == std::vector<int>{0});
    try {
        PerfTarget::from_options(parse_record_args({"-C", "4095"}));
        FAIL("CPU 4095 accepted");
    } catch (const Error& e) {
        CHECK(std::string(e.what()).find("-C: CPU 4095 does not exist or is offline (online: ") == 0);
        CHECK(e.exit_code() == 2);
    }
}

TEST_CASE("PerfTarget: -p takes every thread of the process, a command is per task from its exec", "[source]") {
    const PerfTarget self = PerfTarget::from_options(parse_record_args({"-p", std::to_string(getpid())}));
    CHECK(self.per_task);
    CHECK_FALSE(self.at_exec);
    CHECK(self.tids == *threads_of(getpid()));
    CHECK(self.synth_pids == std::vector<int>{getpid()});
    CHECK_THROWS_AS(PerfTarget::from_options(parse_record_args({"-p", "1073741823"})), Error);

    const PerfTarget cmd = PerfTarget::from_options(parse_record_args({"--call-graph", "dwarf", "--", "true"}));
    CHECK(cmd.per_task);
    CHECK(cmd.at_exec);
    CHECK(cmd.data_maps);
    CHECK(cmd.tids.empty());  // the caller adds the command's pid once it is forked
    const PerfTarget wide = PerfTarget::from_options(parse_record_args({"-a", "--", "true"}));
    CHECK_FALSE(wide.per_task);
    CHECK_FALSE(wide.at_exec);
}

TEST_CASE("PerfSource: the user's events then the tracking event, one ring per CPU", "[source]") {
    PerfTarget t;
    t.cpus = {0, 1, 2};
    t.tids = {10, 11};
    PerfSource src(parse_event_list("cpu-clock,task-clock"), t);
    REQUIRE(src.specs().size() == 3);
    CHECK(src.specs()[2].tracking);
    CHECK(src.ring_count() == 3);
    CHECK(src.fd_count() == 3 * 2 * 3);  // CPUs x tasks x events
    CHECK(src.describe() == "2 task(s)");
    CHECK(src.level_triggered_ok());
}

TEST_CASE("PerfSource::reopen: the lost samples of the events it replaces stay in lost_counts()", "[source]") {
    require_kernel();
    // A ring of one page nobody drains fills within milliseconds (cpu-clock samples an idle CPU
    // too): every later sample is lost, and the kernel counts it (PERF_FORMAT_LOST).
    PerfTarget t;
    t.cpus = {0};
    PerfSource src({parse_event("cpu-clock")}, t);
    std::vector<perf_event_attr> attrs;
    for (const auto& spec : src.specs()) attrs.push_back(src.attr(spec, SamplingConfig{}));
    src.open(attrs, 1);
    src.enable();
    auto lost_of_event0 = [&] {
        uint64_t n = 0;
        for (const auto& l : src.lost_counts()) n += l.event_index == 0 ? l.lost : 0;
        return n;
    };
    REQUIRE(ringcap_test::eventually([&] { return lost_of_event0() > 0; }));
    src.disable();  // final counts from here on
    const std::vector<LostReading> before = src.lost_counts();
    std::vector<uint64_t> old_ids;
    for (const auto& e : src.rings()[0].events) old_ids.push_back(e.id);
    REQUIRE(src.reopen(0));  // as when CPU 0 came back online
    src.disable();
    const std::vector<LostReading> after = src.lost_counts();
    for (const auto& e : src.rings()[0].events)
        CHECK(std::find(old_ids.begin(), old_ids.end(), e.id) == old_ids.end());  // new events, new ids
    // Every count the old events had is still there, under their ids, for the summary and LOST_SAMPLES.
    for (const LostReading& b : before) {
        INFO("event " << b.event_index << " id " << b.id << " lost " << b.lost);
        const auto a = std::find_if(after.begin(), after.end(), [&](const LostReading& l) { return l.id == b.id; });
        REQUIRE(a != after.end());
        CHECK(a->lost == b.lost);
        CHECK(a->cpu == 0);
        CHECK(a->event_index == b.event_index);
    }
}
