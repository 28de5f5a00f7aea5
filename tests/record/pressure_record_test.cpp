// Graded back-pressure end to end: real perf events, an output disk throttled to less than the
// capture writes (cgroup v2 io.max or v1 blkio: tests/tools.hpp WriteThrottle), and perf as the
// reader. What was cut, slowed or dropped is counted, in the file as perf sees it too.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "ringcap/json_report.hpp"
#include "tools.hpp"

namespace {

const std::string kRingcap = RINGCAP_BINARY;
const std::string kWorkload = RINGCAP_WORKLOAD;

struct Capture {
    int status = -1;
    std::string log;
    nlohmann::json json;
};

// Both CPUs busy with the workload while ringcap records them, as a child under `throttle`.
Capture record_throttled(const WriteThrottle& throttle, const std::string& dir, const std::string& flags) {
    const std::string out = dir + "/perf.data", json = dir + "/summary.json";
    const std::string cmd = kRingcap + " record -a -v -e cpu-clock " + flags + " -o " + out + " --json " + json +
                            " -- sh -c \"" + kWorkload + " 4000 & " + kWorkload + " 4000; wait\"";
    Capture c;
    auto r = run_command(throttle.wrap(cmd) + " 2>&1");
    c.status = r.status;
    c.log = r.output;
    c.json = nlohmann::json::parse(read_file(json), nullptr, false);
    return c;
}

// Distinct periods of the samples perf script prints (a lowered frequency shows as longer ones).
std::set<long long> periods(const std::string& perf, const std::string& file) {
    auto r = run_command(perf + " script -F period -i " + file + " 2>/dev/null | sort -u | head -50");
    std::set<long long> out;
    std::istringstream in(r.output);
    for (long long p; in >> p;) out.insert(p);
    return out;
}

// perf reads the whole file: its samples are the summary's, and what back-pressure dropped is lost
// with what the kernel lost.
void check_file_counts(const std::string& perf, const std::string& file, const Capture& c) {
    const PerfStats st = perf_report_stats(perf, file);
    INFO(st.output);
    CHECK(st.ok());
    CHECK(st.count("SAMPLE") == c.json["samples"].get<long long>());
    CHECK(st.events_sum("LOST_SAMPLES") == c.json["lost"].get<long long>() + c.json["dropped"].get<long long>());
}

}  // namespace

TEST_CASE("back-pressure on a slow disk: dwarf stacks cut, counted, and perf still unwinds them", "[pressure][record]") {
    const std::string perf = require_kernel_and_perf();
    TempDir dir("press-cut");
    // 10 MiB/s, 16 MiB of staging and 4 MiB rings: the trimmed capture makes about 45 MB/s for 2 s,
    // so staging, the rings (which hold samples whole until half full) and the disk together cannot
    // hold it whole however the writes fall.
    WriteThrottle throttle(dir.path, 10u << 20);
    const Capture c = record_throttled(throttle, dir.path, "-F 10000 --call-graph dwarf --staging-buffers 16 -m 1024");
    INFO(c.log);
    REQUIRE(c.status == 0);
    REQUIRE(c.json.is_object());
    CHECK(c.json["version"] == ringcap::kJsonSchemaVersion);
    const long long cut = c.json["cut"], samples = c.json["samples"], lost = c.json["lost"], dropped = c.json["dropped"];
    INFO(samples << " samples, " << cut << " cut, " << dropped << " dropped, " << lost << " lost by the kernel");
    CHECK(cut > 0);
    CHECK(c.json["back_pressure"]["shortest_stack"].is_number());
    CHECK(c.log.find("back-pressure on cpu") != std::string::npos);  // -v: when it engaged
    CHECK(c.log.find(std::to_string(cut) + " sample(s) with their user stack cut") != std::string::npos);
    // perf reads every sample, counts what was dropped with the kernel's losses, and unwinds the cut
    // stacks (the workload's frames lie within the first KiB above its stack pointer).
    const std::string file = dir.path + "/perf.data";
    check_file_counts(perf, file, c);
    auto script = run_command(perf + " script -F ip,sym -i " + file + " 2>/dev/null | grep -c -w main");
    CHECK(std::stoll(script.output) > samples / 4);
}

TEST_CASE("back-pressure with --no-cut-samples: no stack is cut, the frequency is lowered or samples dropped, counted",
          "[pressure][record]") {
    const std::string perf = require_kernel_and_perf();
    TempDir dir("press-nocut");
    WriteThrottle throttle(dir.path, 4u << 20);  // far below what even whole samples at a lower rate need
    const Capture c =
        record_throttled(throttle, dir.path, "-F 10000 --call-graph dwarf --no-cut-samples --staging-buffers 16");
    INFO(c.log);
    REQUIRE(c.status == 0);
    REQUIRE(c.json.is_object());
    const long long samples = c.json["samples"], lost = c.json["lost"], dropped = c.json["dropped"];
    const auto& bp = c.json["back_pressure"];
    INFO(samples << " samples, " << dropped << " dropped, " << lost << " lost by the kernel, frequency lowered "
                 << bp["frequency_lowered"] << " time(s)");
    CHECK(c.json["cut"] == 0);
    CHECK(bp["shortest_stack"].is_null());
    CHECK((dropped > 0 || bp["frequency_lowered"] > 0));
    const std::string file = dir.path + "/perf.data";
    check_file_counts(perf, file, c);
    // A lowered frequency shows in the samples' periods: each carries its own.
    if (bp["frequency_lowered"] > 0) CHECK(periods(perf, file).size() > 1);
    // The process and mapping records are never dropped: the workload's samples are named.
    auto named = run_command(perf + " report --stdio --sort comm -i " + file + " 2>/dev/null");
    CHECK(named.output.find("ringcap_workloa") != std::string::npos);
}
