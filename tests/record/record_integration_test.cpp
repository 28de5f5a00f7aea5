// End to end: the ringcap binary records real perf events, and perf (the independent reader) must
// agree with ringcap's own summary.
#include <catch2/catch.hpp>

#include <regex>
#include <string>
#include <sys/stat.h>

#include "support.hpp"
#include "tools.hpp"

namespace {

const std::string kRingcap = RINGCAP_BINARY;

// Value of key=N in ringcap's final summary line, or -1.
long long summary_value(const std::string& out, const std::string& key) {
    auto at = out.find("ringcap: samples=");
    if (at == std::string::npos) return -1;
    const std::string line = out.substr(at, out.find('\n', at) - at);
    std::smatch m;
    if (std::regex_search(line, m, std::regex("[ :]" + key + "=([0-9]+)"))) return std::stoll(m[1]);
    return -1;
}

// "SAMPLE events: N" from perf report --stats (the first, aggregated, occurrence), or -1.
long long perf_stat(const std::string& out, const std::string& type) {
    std::smatch m;
    if (std::regex_search(out, m, std::regex("\\s" + type + " events:\\s+([0-9]+)"))) return std::stoll(m[1]);
    return -1;
}

void require_kernel_and_perf(std::string& perf) {
    std::string why = kernel_refusal();
    if (!why.empty()) skip_test(why);
    perf = find_perf();
    if (perf.empty()) skip_test("perf (linux-perf) is not installed: cannot read the file back");
}

}  // namespace

TEST_CASE("system-wide record: perf report counts the samples ringcap reports", "[record][integration]") {
    std::string perf;
    require_kernel_and_perf(perf);
    TempFile f("record");
    auto rec = run_command(kRingcap + " record -a -e cpu-clock -F 2000 --duration 1 -o " + f.path + " 2>&1");
    INFO(rec.output);
    REQUIRE(rec.status == 0);
    const long long samples = summary_value(rec.output, "samples");
    REQUIRE(samples > 0);
    CHECK(summary_value(rec.output, "lost") == 0);

    auto stats = run_command(perf + " report --stats -i " + f.path + " 2>&1");
    INFO(stats.output);
    REQUIRE(stats.status == 0);
    CHECK(perf_stat(stats.output, "SAMPLE") == samples);

    // perf script must parse the whole file: exit 0 and nothing on stderr (no warnings).
    auto script = run_command(perf + " script -i " + f.path + " 2>&1 >/dev/null");
    INFO(script.output);
    CHECK(script.status == 0);
    CHECK(script.output.empty());
    auto lines = run_command(perf + " script -i " + f.path + " 2>/dev/null | wc -l");
    CHECK(std::stoll(lines.output) == samples);
}

TEST_CASE("record of a command stops when it exits, an existing file becomes .old", "[record][integration]") {
    std::string perf;
    require_kernel_and_perf(perf);
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
    auto stats = run_command(perf + " report --stats -i " + f.path + " 2>&1");
    CHECK(perf_stat(stats.output, "SAMPLE") == summary_value(rec.output, "samples"));
}

TEST_CASE("a start that fails leaves an existing output untouched", "[record][integration]") {
    std::string why = kernel_refusal();
    if (!why.empty()) skip_test(why);
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
    std::string why = kernel_refusal();
    if (!why.empty()) skip_test(why);
    TempFile f("hw");
    auto rec = run_command(kRingcap + " record -a -e cycles --duration 1 -o " + f.path + " 2>&1");
    if (rec.status == 0) skip_test("this machine has a hardware PMU: cycles is supported here");
    INFO(rec.output);
    CHECK(rec.status == 2);
    CHECK(rec.output.find("event 'cycles' is not supported") != std::string::npos);
}

TEST_CASE("at the maximum rate the file stays in stream order (tick flushes between full buffers)",
          "[record][integration]") {
    std::string perf;
    require_kernel_and_perf(perf);
    TempFile f("maxrate");
    // Full 1 MiB buffers and the 0.5 s partial flush interleave here; a flush that overtook queued
    // full buffers put bytes out of order and perf stopped at the seam.
    for (const std::string backend : {"uring", "epoll"}) {
        auto rec = run_command(kRingcap + " record -a -F max --backend " + backend + " --duration 2 -o " + f.path +
                               " 2>&1");
        INFO(backend << ": " << rec.output);
        REQUIRE(rec.status == 0);
        auto stats = run_command(perf + " report --stats -i " + f.path + " 2>&1");
        INFO(stats.output);
        CHECK(stats.status == 0);
        CHECK(stats.output.find("failed to process") == std::string::npos);
        CHECK(perf_stat(stats.output, "SAMPLE") == summary_value(rec.output, "samples"));
    }
}
