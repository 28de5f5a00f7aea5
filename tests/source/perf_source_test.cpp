// The perf ring source before it opens anything: targets from the options, and what it will need.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "ringcap/perf_source.hpp"

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
