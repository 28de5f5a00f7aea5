// -o -: perf's pipe format on stdout, read by perf script / perf report -i - through a real pipe.
// Counts are compared with ringcap's own summary; a reader that goes away must end the record
// promptly, say why, and exit 1.
#include <catch2/catch.hpp>

#include <chrono>
#include <regex>
#include <string>
#include <sys/stat.h>

#include "tools.hpp"

namespace {

const std::string kRingcap = RINGCAP_BINARY;

// A shell pipeline under bash (for PIPESTATUS); single quotes in `cmd` are not allowed.
CommandResult bash(const std::string& cmd) {
    REQUIRE(cmd.find('\'') == std::string::npos);
    return run_command("bash -c '" + cmd + "'");
}

long long number_after(const std::string& text, const std::string& pattern) {
    std::smatch m;
    if (!std::regex_search(text, m, std::regex(pattern))) return -1;
    return std::stoll(m[1]);
}

// One field of a JSON file, as python3's json module reads it.
std::string json_field(const std::string& path, const std::string& expr) {
    auto r = run_command("python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' " +
                         path + " '" + expr + "' 2>&1");
    std::string out = r.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

struct PipeRun {
    long long samples = -1;  // the summary's
    long long read = -1;     // what perf counted
    int ringcap_status = -1, perf_status = -1;
    std::string err, perf_err;
};

// ringcap record ARGS -o - | perf script -i -, counting the sample lines of `event`.
PipeRun script_through_pipe(const std::string& perf, const std::string& args, const std::string& event) {
    TempFile err("pipe-err"), perr("pipe-perr");
    auto r = bash(kRingcap + " record " + args + " -o - 2>" + err.path + " | " + perf + " script -i - -F event 2>" +
                  perr.path + " | grep -c \"" + event + "\"; echo status ${PIPESTATUS[0]} ${PIPESTATUS[1]}");
    PipeRun p;
    p.err = read_file(err.path);
    p.perf_err = read_file(perr.path);
    p.samples = number_after(p.err, "ringcap: samples=([0-9]+)");
    p.read = number_after(r.output, "^([0-9]+)");
    p.ringcap_status = int(number_after(r.output, "status ([0-9]+)"));
    p.perf_status = int(number_after(r.output, "status [0-9]+ ([0-9]+)"));
    return p;
}

bool have_tracefs() {
    struct stat st{};
    return ::stat("/sys/kernel/tracing/events/sched/sched_switch", &st) == 0 ||
           ::stat("/sys/kernel/debug/tracing/events/sched/sched_switch", &st) == 0;
}

}  // namespace

TEST_CASE("pipe mode: perf script -i - gets every sample of the summary, and the JSON names the output -", "[pipe]") {
    const std::string perf = require_kernel_and_perf();
    TempFile err("pipe-err"), json("pipe-json");
    auto r = bash(kRingcap + " record -a -F 2000 --duration 1 -o - --json " + json.path + " 2>" + err.path + " | " +
                  perf + " script -i - -F event 2>/dev/null | grep -c cpu-clock; echo status ${PIPESTATUS[0]}");
    const std::string log = read_file(err.path);
    INFO(log << r.output);
    REQUIRE(number_after(r.output, "status ([0-9]+)") == 0);
    const long long read = number_after(r.output, "^([0-9]+)");
    CHECK(read > 0);
    CHECK(std::to_string(read) == json_field(json.path, "j[\"samples\"]"));
    CHECK(json_field(json.path, "j[\"files\"]") == "[\x27-\x27]");
    CHECK(json_field(json.path, "j[\"error\"]") == "None");
    CHECK(log.find("ringcap: pipe: sent") != std::string::npos);
    CHECK(log.find("peak backlog") != std::string::npos);
}

TEST_CASE("pipe mode: perf report -i - --stats, its SAMPLE count is the summary's", "[pipe]") {
    const std::string perf = require_kernel_and_perf();
    TempFile err("pipe-err");
    auto r = bash(kRingcap + " record -a -F 2000 --duration 1 -o - 2>" + err.path + " | " + perf +
                  " report -i - --stats 2>&1; echo status ${PIPESTATUS[0]} ${PIPESTATUS[1]}");
    const std::string log = read_file(err.path);
    INFO(log << r.output);
    REQUIRE(number_after(r.output, "status ([0-9]+ [0-9]+)") >= 0);
    CHECK(r.output.find("status 0 0") != std::string::npos);
    const long long samples = number_after(log, "ringcap: samples=([0-9]+)");
    CHECK(samples > 0);
    CHECK(number_after(r.output, "SAMPLE events:\\s+([0-9]+)") == samples);
}

TEST_CASE("pipe mode with -z: perf script -i - reads the compressed stream, every sample", "[pipe][compress]") {
    // perf 6.1's report --stats fails on a compressed pipe stream (README): script reads it.
    const std::string perf = require_kernel_and_perf();
    const PipeRun p = script_through_pipe(perf, "-a -z -F 2000 --duration 1", "cpu-clock");
    INFO(p.err << p.perf_err);
    CHECK(p.ringcap_status == 0);
    CHECK(p.perf_status == 0);
    CHECK(p.samples > 0);
    CHECK(p.read == p.samples);
    CHECK(p.err.find("compressed_records=") != std::string::npos);
}

TEST_CASE("pipe mode: with a tracepoint: HEADER_TRACING_DATA lets perf script print sched_switch", "[pipe]") {
    const std::string perf = require_kernel_and_perf();
    if (!have_tracefs()) skip_test("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)");
    const PipeRun p = script_through_pipe(perf, "-a -e sched:sched_switch --duration 1", "sched:sched_switch");
    INFO(p.err << p.perf_err);
    CHECK(p.ringcap_status == 0);
    CHECK(p.perf_status == 0);
    CHECK(p.samples > 0);
    CHECK(p.read == p.samples);
}

TEST_CASE("pipe mode: the recorded command's stdout goes to stderr, not into the stream", "[pipe]") {
    const std::string perf = require_kernel_and_perf();
    TempFile err("pipe-err");
    auto r = bash(kRingcap + " record -F 2000 -o - -- sh -c \"echo from-the-command\" 2>" + err.path + " | " + perf +
                  " report -i - --stats 2>&1; echo status ${PIPESTATUS[0]} ${PIPESTATUS[1]}");
    const std::string log = read_file(err.path);
    INFO(log << r.output);
    CHECK(r.output.find("status 0 0") != std::string::npos);
    CHECK(log.find("from-the-command") != std::string::npos);
    CHECK(r.output.find("from-the-command") == std::string::npos);
}

TEST_CASE("pipe mode into head -c 100000: the reader goes away, ringcap stops at once, says why, exits 1", "[pipe]") {
    require_kernel();
    TempFile err("pipe-err"), json("pipe-json");
    const auto start = std::chrono::steady_clock::now();
    // 30 s unless it notices: at 20 kHz on every CPU, 100 kB leave the pipe within a fraction of a second.
    auto r = bash("timeout 60 " + kRingcap + " record -a -F 20000 --duration 30 -o - --json " + json.path + " 2>" +
                  err.path + " | head -c 100000 >/dev/null; echo status ${PIPESTATUS[0]}");
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string log = read_file(err.path);
    INFO(log << r.output);
    CHECK(number_after(r.output, "status ([0-9]+)") == 1);
    CHECK(took < 15);
    CHECK(log.find("stopped (the pipe reader went away)") != std::string::npos);
    CHECK(log.find("ERROR: the pipe reader went away") != std::string::npos);
    CHECK(json_field(json.path, "j[\"stop_reason\"]") == "the pipe reader went away");
    CHECK(json_field(json.path, "j[\"exit_code\"]") == "1");
    // What the reader did not take is counted, not silently dropped.
    CHECK(std::stoll(json_field(json.path, "j[\"unwritten_bytes\"]")) > 0);
}

TEST_CASE("pipe mode: refused with --json -, and on a terminal", "[pipe]") {
    TempFile err("pipe-err");
    auto r = bash(kRingcap + " record -a -o - --json - 2>" + err.path + " | wc -c; echo status ${PIPESTATUS[0]}");
    const std::string log = read_file(err.path);
    INFO(log << r.output);
    CHECK(number_after(r.output, "status ([0-9]+)") == 2);
    CHECK(number_after(r.output, "^\\s*([0-9]+)") == 0);  // nothing on stdout, not even the JSON
    CHECK(log.find("--json -") != std::string::npos);
    // script(1) gives ringcap a terminal for stdout.
    if (run_command("command -v script >/dev/null").status != 0) return;
    auto t = run_command("script -qec \"" + kRingcap + " record -a --duration 0.1 -o -\" /dev/null 2>&1");
    INFO(t.output);
    CHECK(t.output.find("stdout is a terminal") != std::string::npos);
}

TEST_CASE("pipe mode with a slow reader: beyond --pipe-backlog the record stops, exit 1, every sample delivered", "[pipe]") {
    const std::string perf = require_kernel_and_perf();
    TempFile err("pipe-err");
    // A reader that reads nothing until ringcap says it stops: the backlog grows (a busy loop with
    // dwarf stacks: 8 KB samples) until it passes 4 MiB, whatever the machine's speed. Then the reader
    // takes everything.
    auto r = bash("timeout 120 " + kRingcap + " record -a --call-graph dwarf -F 1000 --duration 60 --pipe-backlog 4M -o - 2>" +
                  err.path + " -- sh -c \"while :; do :; done\" | (until grep -q \"stopping: the pipe reader could not keep up\" " +
                  err.path + "; do sleep 0.05; done; " + perf + " script -i - -F event 2>/dev/null | grep -c cpu-clock)" +
                  "; echo status ${PIPESTATUS[0]}");
    const std::string log = read_file(err.path);
    INFO(log << r.output);
    CHECK(number_after(r.output, "status ([0-9]+)") == 1);
    CHECK(log.find("stopped (the pipe reader could not keep up)") != std::string::npos);
    CHECK(log.find("everything captured was delivered") != std::string::npos);
    const long long samples = number_after(log, "ringcap: samples=([0-9]+)");
    CHECK(samples > 0);
    CHECK(number_after(r.output, "^([0-9]+)") == samples);
}
