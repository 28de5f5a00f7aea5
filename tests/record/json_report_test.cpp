// --json: the summary as JSON, read back with python3's json module and compared with perf's count.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "ringcap/json_report.hpp"
#include "spawn.hpp"
#include "tools.hpp"

using namespace ringcap;
using namespace ringcap_test;

namespace {
// One field of a JSON file, as python3's json module reads it (a Python expression on `j`).
std::string py(const std::string& file, const std::string& expr) {
    // The expression goes in double quotes (it uses single ones), evaluated by python.
    auto r = run_command("python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' " +
                         file + " \"" + expr + "\" 2>&1");
    std::string out = r.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return r.status == 0 ? out : "python3 failed: " + out;
}
}  // namespace

TEST_CASE("JSON summary: every field of schema 2 from a summary", "[json]") {
    RecordSummary s;
    s.path = "out.data";
    s.total.samples = 10;
    s.total.throttles = 1;
    s.kernel_lost = 3;
    s.file_bytes = 4096;
    s.seconds = 1.5;
    s.stop_reason = "duration reached";
    RingSummary r;
    r.cpu = 1;
    r.ring.samples = 10;
    r.ring.lost = 3;
    r.ring.bytes = 480;
    s.cpus.push_back(r);
    s.events.push_back({"cpu-clock:ppp", 10, 3, 0, 0});
    s.collectors.push_back({1, 0.25, 4096});
    s.collector_nice = -5;
    const auto j = nlohmann::json::parse(summary_json(s, 0, ""));
    CHECK(j["version"] == kJsonSchemaVersion);
    CHECK(j["samples"] == 10);
    CHECK(j["lost"] == 3);
    CHECK(j["dropped"] == 0);
    CHECK(j["throttled"] == 1);
    CHECK(j["bytes"] == 4096);
    CHECK(j["files"] == nlohmann::json::array({"out.data"}));
    CHECK(j["duration_s"] == 1.5);
    CHECK(j["exit_code"] == 0);
    CHECK(j["stop_reason"] == "duration reached");
    CHECK(j["error"].is_null());
    CHECK(j["cut"] == 0);
    CHECK(j["cpus"][0] == nlohmann::json{{"cpu", 1}, {"samples", 10}, {"lost", 3}, {"dropped", 0}, {"cut", 0}, {"bytes", 480}});
    CHECK(j["events"][0] == nlohmann::json{{"name", "cpu-clock:ppp"}, {"samples", 10}, {"lost", 3}, {"dropped", 0}});
    CHECK(j["back_pressure"] == nlohmann::json{{"dropped", 0},
                                               {"cut", 0},
                                               {"shortest_stack", nullptr},
                                               {"frequency_lowered", 0},
                                               {"lowest_frequency_divisor", 1},
                                               {"zstd_lowered", 0},
                                               {"fastest_zstd_level", nullptr},
                                               {"trimmed_bytes", 0}});
    CHECK(j["collector_realtime"].is_null());
    CHECK(j["collectors"][0] == nlohmann::json{{"cpu_s", 0.25}, {"bytes", 4096}, {"rings", 1}});
    CHECK(j["collector_nice"] == -5);
    CHECK(j["compression"].is_null());

    // Back-pressure: what it left out counts as dropped, with --max-size's refused samples.
    s.total.dropped = 4;
    s.total.cut = 6;
    s.refused_samples = 2;
    s.pressure.shortest_cut = 1024;
    s.pressure.slowed = 1;
    s.pressure.worst_rate_shift = 2;
    s.collector_realtime = 1;
    const auto b = nlohmann::json::parse(summary_json(s, 0, ""));
    CHECK(b["dropped"] == 6);
    CHECK(b["cut"] == 6);
    CHECK(b["back_pressure"]["dropped"] == 4);
    CHECK(b["back_pressure"]["shortest_stack"] == 1024);
    CHECK(b["back_pressure"]["lowest_frequency_divisor"] == 4);
    CHECK(b["collector_realtime"] == 1);
    s.total.dropped = s.total.cut = s.refused_samples = 0;

    // A write error: what was read but not written is known in bytes, not samples.
    s.error = "writing 'out.data' failed: No space left on device (ENOSPC)";
    s.total.bytes = 10000;
    const auto f = nlohmann::json::parse(summary_json(s, 1, ""));
    CHECK(f["dropped"].is_null());
    CHECK(f["unwritten_bytes"] == 10000 - 4096);
    CHECK(f["error"] == s.error);
    CHECK(json_path_in({"-a", "--json", "x.json"}) == "x.json");
    CHECK(json_path_in({"--json=-", "-a"}) == "-");
    CHECK(json_path_in({"--", "prog", "--json", "y"}) == "");
}

TEST_CASE("JSON summary (--json): python3 reads it and its counts are perf report's", "[json]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile out("json-data"), json("json");
    auto r = run_command(kRingcap + " record -e cpu-clock,task-clock -F 1000 -o " + out.path + " --json " + json.path +
                         " -- " + RINGCAP_WORKLOAD + " 300 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    INFO(read_file(json.path));
    const PerfStats st = perf_report_stats(perf, out.path);
    CHECK(py(json.path, "j['version']") == std::to_string(kJsonSchemaVersion));
    CHECK(py(json.path, "j['flight_recorder']") == "None");
    CHECK(py(json.path, "j['samples']") == std::to_string(st.count("SAMPLE")));
    CHECK(py(json.path, "j['exit_code']") == "0");
    CHECK(py(json.path, "j['error']") == "None");
    CHECK(py(json.path, "j['files']") == "['" + out.path + "']");
    CHECK(py(json.path, "j['stop_reason']") == "every task exited");
    CHECK(py(json.path, "[e['name'] for e in j['events']]") == "['cpu-clock', 'task-clock']");
    for (size_t e = 0; e < 2; ++e)
        CHECK(py(json.path, "j['events'][" + std::to_string(e) + "]['samples']") ==
              std::to_string(st.event_count(e, "SAMPLE")));
    CHECK(py(json.path, "sum(c['samples'] for c in j['cpus']) == j['samples']") == "True");
    CHECK(py(json.path, "len(j['collectors']) >= 1 and all(c['cpu_s'] > 0 for c in j['collectors'])") == "True");
    CHECK(py(json.path, "j['bytes'] > 0 and j['duration_s'] > 0") == "True");
}

TEST_CASE("JSON summary (--json) is written on failures too: setup refused, bad usage, a full disk", "[json]") {
    TempFile json("json-fail");
    auto r = run_command(kRingcap + " record -a -o /nonexistent-dir/x.data --json " + json.path + " -- true 2>&1");
    CHECK(r.status == 2);
    CHECK(py(json.path, "j['exit_code']") == "2");
    CHECK(py(json.path, "j['files']") == "[]");
    CHECK(py(json.path, "'does not exist' in j['error']") == "True");
    r = run_command(kRingcap + " record --bogus --json=" + json.path + " 2>&1");
    CHECK(r.status == 2);
    CHECK(py(json.path, "'--bogus' in j['error']") == "True");
    r = run_command(kRingcap + " record -a -o /dev/null --json - -- true 2>/dev/null");
    CHECK(r.status == 2);
    CHECK(r.output.find("\"exit_code\":2") != std::string::npos);  // --json -: stdout

    require_kernel();
    SmallFs fs("2m");
    std::vector<std::string> args{"record", "-a", "-F", "10000", "-g", "-o", fs.dir + "/perf.data", "--json", json.path};
    args.insert(args.end(), kBusy.begin(), kBusy.end());
    TempFile log("json-full-log");
    CHECK(wait_exit(spawn(args, log.path)) == 1);
    INFO(read_file(log.path));
    CHECK(py(json.path, "j['exit_code']") == "1");
    CHECK(py(json.path, "'No space left on device' in j['error']") == "True");
    CHECK(py(json.path, "j['dropped'] is None and j['unwritten_bytes'] > 0") == "True");
    CHECK(py(json.path, "j['samples'] > 0") == "True");
}
