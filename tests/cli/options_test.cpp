// Command-line parsing: perf record's flags, and one clear error (exit status 2) for bad input.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "ringcap/options.hpp"

using namespace ringcap;

TEST_CASE("record options follow perf record", "[cli]") {
    auto o = parse_record_args(split("-a -e cpu-clock,task-clock,page-faults -F 2000 -m 256 -o out.data --duration 1.5 -v"));
    CHECK(o.all_cpus);
    REQUIRE(o.events.size() == 3);
    CHECK(o.events[0].name == "cpu-clock");
    CHECK(o.events[0].config == PERF_COUNT_SW_CPU_CLOCK);
    CHECK(o.events[1].config == PERF_COUNT_SW_TASK_CLOCK);
    CHECK(o.events[2].config == PERF_COUNT_SW_PAGE_FAULTS);
    CHECK(o.sampling.use_freq);
    CHECK(o.sampling.freq == 2000);
    CHECK(o.mmap_pages == 256);
    CHECK(o.output == "out.data");
    CHECK(o.duration_s == Approx(1.5));
    CHECK(o.verbose == 1);

    CHECK(o.compression_level == 0);
    CHECK(parse_record_args(split("-a -z")).compression_level == 1);
    CHECK(parse_record_args(split("-a -z5")).compression_level == 5);
    CHECK(parse_record_args(split("-a --compression-level")).compression_level == 1);
    CHECK(parse_record_args(split("-a --compression-level=22")).compression_level == 22);
    // As perf: a value only attached, so `-z sleep 1` records a command.
    CHECK(parse_record_args(split("-z sleep 1")).command == std::vector<std::string>{"sleep", "1"});

    CHECK(o.collector_nice == -5);  // the default, best effort
    CHECK_FALSE(o.collector_nice_given);
    const auto n = parse_record_args(split("-a --collector-nice -10"));
    CHECK(n.collector_nice == -10);
    CHECK(n.collector_nice_given);
    CHECK(parse_record_args(split("-a --collector-nice=0")).collector_nice == 0);
    CHECK(parse_record_args(split("-a --collector-nice 19")).collector_nice == 19);

    auto d = parse_record_args(split("-C 0,2-3"));
    CHECK(d.events.size() == 1);
    CHECK(d.events[0].name == "cpu-clock:ppp");  // perf's default event without a hardware PMU
    CHECK(d.events[0].mods.precise_ip == 3);
    CHECK(d.sampling.freq == 4000);          // default frequency
    CHECK(d.mmap_pages == 0);                // default_ring_pages() at record time
    CHECK(d.output == "perf.data");
    REQUIRE(d.cpus);
    CHECK(*d.cpus == std::vector<int>{0, 2, 3});

    auto c = parse_record_args(split("-c 10000 -m 2M -- sleep 1"));
    CHECK_FALSE(c.sampling.use_freq);
    CHECK(c.sampling.period == 10000);
    CHECK(c.mmap_pages == 512);
    CHECK(c.command == std::vector<std::string>{"sleep", "1"});

    auto e = parse_record_args(split("-a -F4000 --output=x.data --wakeup-watermark 65536"));
    CHECK(e.sampling.freq == 4000);
    CHECK(e.output == "x.data");
    CHECK(e.sampling.wakeup_watermark == 65536);
}

TEST_CASE("bad record command lines are refused with exit status 2", "[cli]") {
    const char* bad[] = {
        "",                          // no target
        "-a -C 0",                   // both targets
        "-a -e nope",                // unknown event
        "-a -e cpu-clock,,dummy",    // empty event name
        "-C 1-0",                    // malformed list
        "-C x",                      //
        "-C ''",                     //
        "-a -F 0",                   // zero frequency
        "-a -F -5",                  // negative
        "-a -F 12abc",               // garbage
        "-a -c 0",                   // zero period
        "-a -F 100 -c 100",          // both
        "-a -m 3",                   // not a power of two
        "-a -m 0",                   //
        "-a -m -4",                  //
        "-a -m 99999999999",         // absurd
        "-a --duration 0",           //
        "-a --duration -1",          //
        "-a --duration abc",         //
        "-a --bogus",                // unknown flag
        "-a -z0",                    // zstd levels are 1..22
        "-a -z23",                   //
        "-a --compression-level=x",  //
        "-a -o",                     // missing value
        "-a --",                     // no command after --
        "-a --wakeup-events 1 --wakeup-watermark 4096",
        "-a --staging-buffers 2 --staging-kb 4",  // below the 128 KiB floor
        "-a --switch-output=often",  // neither signal, a size nor a time
        "-a --switch-output=10x",    //
        "-a --switch-output=0s",     //
        "-a --switch-output=500ms",  // perf's units: s, m, h, d
        "-a --switch-max-files 3",   // without --switch-output
        "-a --switch-output --switch-max-files 0",
        "-a --max-size 0",           //
        "-a --max-size 10Q",         //
        "-a --switch-output=100M --max-size 50M",  // the record would stop before the first switch
        "-a --collector-nice -21",   // nice values are -20..19
        "-a --collector-nice 20",    //
        "-a --collector-nice x",     //
        "-a --collector-nice",       //
    };
    for (const char* line : bad) {
        INFO("args: '" << line << "'");
        try {
            parse_record_args(split(line));
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(e.exit_code() == 2);
            CHECK(std::string(e.what()).size() > 10);
        }
    }
}

TEST_CASE("rotation and size options as perf record takes them", "[cli]") {
    auto o = parse_record_args(split("-a --switch-output"));
    CHECK(o.switch_output.mode == SwitchOutput::Mode::Signal);
    o = parse_record_args(split("-a --switch-output=signal --switch-max-files=5"));
    CHECK(o.switch_output.mode == SwitchOutput::Mode::Signal);
    CHECK(o.switch_output.max_files == 5);
    o = parse_record_args(split("-a --switch-output=500M --max-size 2G"));
    CHECK(o.switch_output.mode == SwitchOutput::Mode::Size);
    CHECK(o.switch_output.bytes == 500ull << 20);
    CHECK(o.max_size == 2ull << 30);
    o = parse_record_args(split("-a --switch-output=30s"));
    CHECK(o.switch_output.mode == SwitchOutput::Mode::Time);
    CHECK(o.switch_output.seconds == 30);
    CHECK(parse_record_args(split("-a --switch-output=5m")).switch_output.seconds == 300);
    CHECK(parse_record_args(split("-a --switch-output=2h")).switch_output.seconds == 7200);
    CHECK(parse_record_args(split("-a --switch-output=1d")).switch_output.seconds == 86400);
    CHECK(parse_record_args(split("-a --switch-output=4096")).switch_output.bytes == 4096);
    CHECK(parse_record_args(split("-a --switch-output=64k")).switch_output.bytes == 64u << 10);
    // perf takes the value only after '=': a separate word is the command.
    o = parse_record_args(split("--switch-output sleep 1"));
    CHECK(o.switch_output.mode == SwitchOutput::Mode::Signal);
    CHECK(o.command == std::vector<std::string>{"sleep", "1"});
    CHECK(parse_record_args(split("-a --max-size=100M")).max_size == 100ull << 20);
    CHECK(parse_record_args(split("-a")).max_size == 0);
    CHECK(parse_record_args(split("-a")).switch_output.mode == SwitchOutput::Mode::None);
}

TEST_CASE("record -G follows perf: one cgroup for every event, or a list matched to the events in order", "[cli][cgroup]") {
    using V = std::vector<std::string>;
    CHECK(parse_record_args(split("-a")).cgroups.empty());
    CHECK(parse_record_args(split("-a -G job")).cgroups == V{"job"});  // the default event
    CHECK(parse_record_args(split("-C 0 --cgroup=slurm/job_7")).cgroups == V{"slurm/job_7"});
    CHECK(parse_record_args(split("-a -e cpu-clock,task-clock -G job")).cgroups == V{"job", "job"});
    CHECK(parse_record_args(split("-a -e cpu-clock,task-clock -G job,")).cgroups == V{"job", ""});
    CHECK(parse_record_args(split("-a -e cpu-clock,task-clock,faults -G ,b")).cgroups == V{"", "b", ""});
    CHECK(parse_record_args(split("-a -G a -e cpu-clock,task-clock -G b")).cgroups == V{"a", "b"});
    CHECK(parse_record_args(split("-a -G /abs/path -- true")).cgroups == V{"/abs/path"});  // system-wide with a command
}

TEST_CASE("record -G without a system-wide target, or with a bad list, is refused with exit status 2", "[cli][cgroup]") {
    const std::pair<const char*, const char*> bad[] = {
        {"-G job -- true", "system-wide"},                  // a command alone is per task
        {"-p 1 -G job", "system-wide"},                     // tasks
        {"-t 1 -G job", "system-wide"},                     //
        {"-a -p 1 -G job", "exclude"},                      // caught earlier: -p excludes -a
        {"-a -G ,", "needs a cgroup name"},                 // nothing but empty entries
        {"-a -G", "needs a value"},                         //
        {"-a -e cpu-clock -G a,b", "2 cgroups for 1 event"},  // more names than events
    };
    for (const auto& [line, why] : bad) {
        INFO("args: '" << line << "'");
        try {
            parse_record_args(split(line));
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(e.exit_code() == 2);
            CHECK_THAT(e.what(), Catch::Matchers::Contains(why));
        }
    }
}
