// The two seed lessons as tested guarantees, plus per-task capture and multishot re-arming.
//  001: events sharing a ring via SET_OUTPUT wake the owner's fd; identical events end up with
//       equal sample counts.
//  000: a hung-up fd is retired, never re-polled; the loop stops promptly once all have hung up.
#include <catch2/catch.hpp>

#include <sstream>
#include <thread>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include "ringcap/options.hpp"
#include "ringcap/recorder.hpp"
#include "ringcap/records.hpp"
#include "ringcap/staging.hpp"
#include "testkit/perf_data_reader.hpp"
#include "tools.hpp"
#include "spawn.hpp"

using namespace ringcap;

namespace {

// Two shell loops, one per CPU of this machine kind, bounded by iterations (not time).
const std::vector<std::string> kBusyCommand = {
    "sh", "-c", "busy() { i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done; }; busy & busy; wait"};

RecordOptions options(const std::string& args, const std::string& out,
                      const std::vector<std::string>& command = {}) {
    std::istringstream in(args);
    std::vector<std::string> v;
    for (std::string w; in >> w;) v.push_back(w);
    if (!command.empty()) {
        v.push_back("--");
        v.insert(v.end(), command.begin(), command.end());
    }
    RecordOptions o = parse_record_args(v);
    o.output = out;
    o.argv = {"ringcap", "record"};
    return o;
}

}  // namespace

TEST_CASE("three identical events in one ring end with equal sample counts (seed 001)", "[seed][record]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("seed001");
    for (Backend backend : {Backend::Uring, Backend::Epoll}) {
        INFO("backend " << (backend == Backend::Uring ? "io_uring" : "epoll"));
        RecordOptions o = options("-a -e cpu-clock,cpu-clock,cpu-clock -c 250000", f.path);
        o.backend = backend;
        o.command = kBusyCommand;
        std::ostringstream log;
        RecordSummary sum;
        REQUIRE(run_record(o, log, &sum) == 0);
        INFO(log.str());

        REQUIRE(sum.events.size() == 3);
        const double a = double(sum.events[0].samples), b = double(sum.events[1].samples),
                     c = double(sum.events[2].samples);
        REQUIRE(a > 1000);  // the loops ran long enough to give each event many samples
        const double lo = std::min({a, b, c}), hi = std::max({a, b, c});
        CHECK((hi - lo) / hi <= 0.02);
        CHECK(sum.kernel_lost == 0);

        // ringcap's own reader agrees with the summary, event by event...
        std::string err;
        auto file = read_perf_data(f.path, &err);
        REQUIRE(file);
        // The three events, then the tracking event (dummy:u), which never samples.
        REQUIRE(file->counts.samples_per_attr.size() == 4);
        CHECK(file->attrs[3].name == "dummy:u");
        CHECK(file->counts.samples_per_attr[3] == 0);
        for (size_t e = 0; e < 3; ++e) CHECK(file->counts.samples_per_attr[e] == sum.events[e].samples);
        CHECK(file->counts.samples == sum.total.samples);
        CHECK(file->counts.unknown_ids == 0);
        CHECK_FALSE(file->counts.truncated);

        // ...and so does perf.
        const PerfStats stats = perf_report_stats(perf, f.path);
        INFO(stats.output);
        REQUIRE(stats.ok());
        REQUIRE(stats.events.size() == 3);  // perf prints no block for the tracking event: no samples
        for (size_t e = 0; e < 3; ++e) CHECK(uint64_t(stats.event_count(e, "SAMPLE")) == sum.events[e].samples);
    }
}

TEST_CASE("a mix of events shares one ring per CPU and only ring owners are polled", "[seed][record]") {
    require_kernel();
    TempFile f("mix");
    RecordOptions o = options("-a -e cpu-clock,task-clock,page-faults -F 1000", f.path);
    o.command = kBusyCommand;
    std::ostringstream log;
    RecordSummary sum;
    REQUIRE(run_record(o, log, &sum) == 0);
    INFO(log.str());
    CHECK(sum.cpus.size() == online_cpus().size());  // one ring per CPU, not per event
    CHECK(sum.events[0].samples > 0);
    CHECK(sum.events[2].samples > 0);  // the shell's page faults
    auto file = read_perf_data(f.path, nullptr);
    REQUIRE(file);
    for (size_t e = 0; e < 3; ++e) CHECK(file->counts.samples_per_attr[e] == sum.events[e].samples);
}

TEST_CASE("per-task capture follows the command's children and ends when all exit", "[seed][task]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("task");
    for (Backend backend : {Backend::Uring, Backend::Epoll}) {
        INFO("backend " << (backend == Backend::Uring ? "io_uring" : "epoll"));
        RecordOptions o = options("-F 2000", f.path, kBusyCommand);  // per task: no -a
        o.backend = backend;
        std::ostringstream log;
        RecordSummary sum;
        REQUIRE(run_record(o, log, &sum) == 0);
        INFO(log.str());
        CHECK(sum.stop_reason == "every task exited");
        CHECK(sum.total.samples > 0);
        for (const auto& c : sum.cpus) CHECK(c.hung_up);
        // Each ring hung up once per event fd of its CPU at most, and after the last one the loop
        // did not spin: each wait after it returned for a write's completion, the session's round
        // request or stop, or the tick (a loaded machine splits them; a spin makes thousands).
        CHECK(sum.hangups >= sum.cpus.size());
        CHECK(sum.waits_after_hangup <= 4 + sum.writes);

        // The two busy loops are children of the shell: inherit=1 must have followed them.
        auto pids = run_command(perf + " script -i " + f.path + " -F pid 2>/dev/null | sort -u | wc -l");
        CHECK(std::stoi(pids.output) >= 2);
        const PerfStats stats = perf_report_stats(perf, f.path);
        CHECK(stats.ok());
        CHECK(stats.count("SAMPLE") == (long long)sum.total.samples);
    }
}

TEST_CASE("record -p of a process that does not exist: exit 2, no file", "[seed][task]") {
    TempFile f("nopid");
    std::remove(f.path.c_str());
    auto r = run_command(std::string(RINGCAP_BINARY) + " record -p 1073741823 -o " + f.path + " 2>&1");
    CHECK(r.status == 2);
    CHECK(r.output.find("no such process") != std::string::npos);
    struct stat st{};
    CHECK(stat(f.path.c_str(), &st) != 0);
}

TEST_CASE("record -p follows an existing process until it exits", "[seed][task]") {
    require_kernel();
    TempFile f("pid");
    // A child of the test that waits until the record has started (so a slow setup, as under TSan,
    // does not miss it), then burns CPU for a bounded number of iterations and exits.
    int go[2];
    REQUIRE(pipe(go) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        dup2(go[0], 3);
        execlp("sh", "sh", "-c", "read x <&3; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done", (char*)nullptr);
        _exit(127);
    }
    close(go[0]);
    RecordOptions o = options("-p " + std::to_string(pid) + " -F 2000", f.path);
    std::ostringstream log;
    RecordSummary sum;
    int rc = -1;
    std::thread record([&] { rc = run_record(o, log, &sum); });
    // The header counts the synthesized records of the process once the events are open.
    const bool started = ringcap_test::eventually([&] { return ringcap_test::header_data_size(f.path) > 0; });
    close(go[1]);
    record.join();
    int status = 0;
    waitpid(pid, &status, 0);
    INFO(log.str());
    REQUIRE(started);
    REQUIRE(rc == 0);
    CHECK(sum.stop_reason == "every task exited");
    CHECK(sum.total.samples > 0);
}

TEST_CASE("a tiny CQ ends multishot polls: they are re-armed and nothing is lost from the file", "[seed][record]") {
    require_kernel();
    TempFile f("tinycq");
    RecordOptions o = options("-a -e cpu-clock,cpu-clock,cpu-clock -c 20000 -m 4 --wakeup-events 1", f.path);
    o.backend = Backend::Uring;
    o.cq_entries = 2;
    o.staging_buffers = 8;
    o.staging_buffer_bytes = ringcap::kMinBufferBytes;
    o.command = kBusyCommand;
    std::ostringstream log;
    RecordSummary sum;
    REQUIRE(run_record(o, log, &sum) == 0);
    INFO(log.str());
    CHECK(sum.rearms > 0);

    // Every record the rings produced is in the file: the file holds exactly what the reader took
    // from the rings, plus our FINISHED_ROUND, padding, LOST_SAMPLES and synthesized /proc records.
    auto file = read_perf_data(f.path, nullptr);
    REQUIRE(file);
    const auto& c = file->counts;
    CHECK_FALSE(c.truncated);
    auto count = [&](uint32_t type) { return c.by_type.count(type) ? c.by_type.at(type) : 0; };
    const uint64_t ours = c.finished_rounds + sum.synthesized_records + count(PERF_RECORD_LOST_SAMPLES) +
                          count(ringcap::kRecordPadding);
    CHECK(c.records - ours == sum.total.records);
    CHECK(c.samples == sum.total.samples);
    // Kernel-side loss is reported, not hidden: the file and the summary agree on it. Samples that
    // back-pressure left out (its tiny staging) are LOST_SAMPLES in the file too.
    CHECK(c.lost == sum.total.lost);
    CHECK(c.lost_samples == sum.lost_samples + sum.total.dropped);
}

TEST_CASE("wake-up options (watermark, events) reach the attrs in the file", "[seed][record]") {
    require_kernel();
    TempFile f("wakeup");
    for (const std::string flag : {"--wakeup-watermark 8192", "--wakeup-events 16"}) {
        RecordOptions o = options("-a -F 1000 --duration 0.3 " + flag, f.path);
        std::ostringstream log;
        RecordSummary sum;
        REQUIRE(run_record(o, log, &sum) == 0);
        auto file = read_perf_data(f.path, nullptr);
        REQUIRE(file);
        const perf_event_attr& a = file->attrs.at(0).attr;
        if (flag.find("watermark") != std::string::npos) {
            CHECK(a.watermark == 1);
            CHECK(a.wakeup_watermark == 8192);
        } else {
            CHECK(a.watermark == 0);
            CHECK(a.wakeup_events == 16);
        }
    }
}
