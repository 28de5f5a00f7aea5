// End to end: the ringcap binary records real perf events, and perf (the independent reader) must
// agree with ringcap's own summary.
#include <catch2/catch.hpp>

#include <string>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "ringcap/collector_thread.hpp"
#include "ringcap/sys.hpp"
#include "tools.hpp"

namespace {

const std::string kRingcap = RINGCAP_BINARY;

}  // namespace

TEST_CASE("system-wide record: perf report counts the samples ringcap reports", "[record][integration]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("record");
    auto rec = run_command(kRingcap + " record -a -e cpu-clock -F 2000 --duration 1 -o " + f.path + " 2>&1");
    INFO(rec.output);
    REQUIRE(rec.status == 0);
    const long long samples = summary_value(rec.output, "samples");
    REQUIRE(samples > 0);
    CHECK(summary_value(rec.output, "lost") == 0);

    const PerfStats stats = perf_report_stats(perf, f.path);
    INFO(stats.output);
    REQUIRE(stats.ok());
    CHECK(stats.count("SAMPLE") == samples);

    // perf script must parse the whole file: exit 0 and nothing on stderr (no warnings).
    auto script = run_command(perf + " script -i " + f.path + " 2>&1 >/dev/null");
    INFO(script.output);
    CHECK(script.status == 0);
    CHECK(script.output.empty());
    auto lines = run_command(perf + " script -i " + f.path + " 2>/dev/null | wc -l");
    CHECK(std::stoll(lines.output) == samples);
}

TEST_CASE("record of a command stops when it exits, an existing file becomes .old", "[record][integration]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("cmd");
    {
        std::ofstream old(f.path);
        old << "previous";
    }
    auto rec = run_command(kRingcap + " record -a -F 1000 -o " + f.path + " -- sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done' 2>&1");
    INFO(rec.output);
    REQUIRE(rec.status == 0);
    CHECK(rec.output.find("stopped (command exited)") != std::string::npos);
    CHECK(read_file(f.path + ".old") == "previous");
    const PerfStats stats = perf_report_stats(perf, f.path);
    INFO(stats.output);
    CHECK(stats.ok());
    CHECK(stats.count("SAMPLE") == summary_value(rec.output, "samples"));
}

TEST_CASE("a start that fails leaves an existing output untouched", "[record][integration]") {
    require_kernel();
    TempFile f("fail");
    {
        std::ofstream old(f.path);
        old << "keep me";
    }
    // A hardware event: this kind of machine has no PMU, and elsewhere -C 4095 does not exist.
    for (const std::string args : {"-a -e cycles", "-C 4095", "-a -e no-such-event", "-a -F 0"}) {
        auto rec = run_command(kRingcap + " record " + args + " --duration 1 -o " + f.path + " 2>&1");
        INFO(args << ": " << rec.output);
        if (args == "-a -e cycles" && rec.status == 0) continue;  // a machine with a PMU records it
        CHECK(rec.status == 2);
        CHECK(rec.output.rfind("ringcap: ", 0) == 0);
        CHECK(read_file(f.path) == "keep me");
        struct stat st{};
        CHECK(stat((f.path + ".old").c_str(), &st) != 0);
    }
}

TEST_CASE("hardware events are refused with the event named", "[record][integration]") {
    require_kernel();
    TempFile f("hw");
    auto rec = run_command(kRingcap + " record -a -e cycles --duration 1 -o " + f.path + " 2>&1");
    if (rec.status == 0) skip_test("this machine has a hardware PMU: cycles is supported here");
    INFO(rec.output);
    CHECK(rec.status == 2);
    CHECK(rec.output.find("event 'cycles' is not supported") != std::string::npos);
}

TEST_CASE("at the maximum rate the file stays in stream order (tick flushes between full buffers)",
          "[record][integration]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("maxrate");
    // Full 1 MiB buffers and the 1 s partial flush interleave here; a flush that overtook queued
    // full buffers put bytes out of order and perf stopped at the seam.
    for (const std::string backend : {"uring", "epoll"}) {
        auto rec = run_command(kRingcap + " record -a -F max --backend " + backend + " --duration 2 -o " + f.path +
                               " 2>&1");
        INFO(backend << ": " << rec.output);
        REQUIRE(rec.status == 0);
        const PerfStats stats = perf_report_stats(perf, f.path);
        INFO(stats.output);
        CHECK(stats.ok());
        CHECK(stats.count("SAMPLE") == summary_value(rec.output, "samples"));
    }
}

namespace {

// Field `n` of each task's /proc/PID/task/TID/stat line, io_uring's own workers (iou-wrk-*, which
// take their submitter's priority) left out.
std::vector<int> task_field(const std::string& stat_lines, int n) {
    std::vector<int> out;
    std::istringstream in(stat_lines);
    for (std::string line; std::getline(in, line);) {
        const size_t open = line.find('('), paren = line.rfind(')');  // the name may hold spaces
        if (open == std::string::npos || paren == std::string::npos) continue;
        if (line.compare(open + 1, 4, "iou-") == 0) continue;
        std::istringstream f(line.substr(paren + 2));
        std::string field;
        for (int i = 3; i <= n && f >> field; ++i)
            if (i == n) out.push_back(std::stoi(field));
    }
    return out;
}
// The nice value (field 19), and the SCHED_FIFO/RR priority (field 40, rt_priority; 0 for normal tasks).
std::vector<int> thread_nices(const std::string& stat_lines) { return task_field(stat_lines, 19); }
std::vector<int> thread_rt_priorities(const std::string& stat_lines) { return task_field(stat_lines, 40); }

}  // namespace

TEST_CASE("collectors run at SCHED_FIFO 1 and encoders at nice -5 while the main thread and the command keep the workload's priority", "[record][integration]") {
    require_kernel();
    if (geteuid() != 0) skip_test("a negative nice value needs root (CAP_SYS_NICE)");
    TempDir dir("nice");
    // The command runs once the collectors are armed: it reads the nice values of ringcap's threads
    // ($PPID), then its own.
    const std::string cmd = " -- sh -c 'cat /proc/$PPID/task/*/stat > " + dir.path + "/threads; cat /proc/self/stat > " +
                            dir.path + "/self'";
    struct Case {
        std::string prefix, flags;
        int started_at;  // ringcap's own nice, and so its main thread's and the command's
        int want;        // the encoders' nice, and the collectors' when they are not real-time
        size_t threads;  // how many tasks run at `want`, real-time ones included; 0: all of them
        int rt;          // the collectors' SCHED_FIFO priority (0: none)
        size_t rt_threads;
    };
    // By default a collector per CPU (-a records every online one).
    const size_t n = std::min(ringcap::online_cpus().size(), ringcap::kDefaultCollectors);
    const Case cases[] = {
        {"", "", 0, 0, 0, 1, n},                                 // the collectors real-time, the rest as started
        {"", "-z --threads 2", 0, -5, 2, 1, 2},                  // two collectors real-time, their encoders at -5
        {"", "--no-realtime", 0, -5, n, 0, 0},
        {"", "--collector-nice 3", 0, 3, n, 0, 0},               // a nice chosen replaces the real-time default
        {"", "--collector-nice 0", 0, 0, 0, 0, 0},
        {"", "-r 5", 0, 0, 0, 5, n},
        {"nice -n 4 ", "", 4, 4, 0, 0, 0},                       // the operator's priority wins over the default
        {"nice -n 4 ", "--collector-nice -2", 4, -2, n, 0, 0},   // but not over the flag
        {"", "--threads 1", 0, 0, 0, 1, 1},                      // one collector for every ring
    };
    for (const auto& c : cases) {
        INFO(c.prefix << "ringcap record " << c.flags);
        const std::string json = dir.path + "/j.json";
        auto r = run_command(c.prefix + kRingcap + " record -a -F 100 -q " + c.flags + " -o " + dir.path +
                             "/p.data --json " + json + cmd + " 2>&1");
        INFO(r.output);
        REQUIRE(r.status == 0);
        const auto nices = thread_nices(read_file(dir.path + "/threads"));
        const auto self = thread_nices(read_file(dir.path + "/self"));
        INFO("nice values of ringcap's tasks, main thread first: " << Catch::Detail::stringify(nices));
        REQUIRE(self.size() == 1);
        CHECK(self[0] == c.started_at);  // the command
        REQUIRE(nices.size() >= 2);
        CHECK(nices[0] == c.started_at);  // the main thread
        const auto at = size_t(std::count(nices.begin(), nices.end(), c.want));
        const auto policies = thread_rt_priorities(read_file(dir.path + "/threads"));
        INFO("SCHED_FIFO priorities (0: none): " << Catch::Detail::stringify(policies));
        CHECK(policies[0] == 0);  // the main thread is never real-time
        CHECK(size_t(std::count(policies.begin(), policies.end(), c.rt)) == (c.rt ? c.rt_threads : policies.size()));
        if (c.rt == 0 || c.want != 0) CHECK(at == (c.threads ? c.threads : nices.size()));
        const auto j = nlohmann::json::parse(read_file(json));
        if (c.rt) CHECK(j["collector_realtime"] == c.rt);
        else CHECK(j["collector_realtime"].is_null());
        if (!c.rt) CHECK(j["collector_nice"] == c.want);
    }

    // Pipe mode: the streamer thread (started before the command) runs with the collector.
    auto r = run_command("{ " + kRingcap + " record -a -F 100 -q -o -" + cmd + "; echo $? > " + dir.path +
                         "/status; } | cat > /dev/null");
    INFO(r.output);
    REQUIRE(read_file(dir.path + "/status") == "0\n");
    const auto nices = thread_nices(read_file(dir.path + "/threads"));
    INFO("nice values of ringcap's tasks in pipe mode, main thread first: " << Catch::Detail::stringify(nices));
    REQUIRE(nices.size() >= 3);
    CHECK(nices[0] == 0);
    CHECK(std::count(nices.begin(), nices.end(), -5) == 1);  // the streamer (the collectors are real-time)
    const auto rt = thread_rt_priorities(read_file(dir.path + "/threads"));
    CHECK(size_t(std::count(rt.begin(), rt.end(), 1)) == n);
}
