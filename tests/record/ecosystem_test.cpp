// What users see in perf's tools: a ringcap file of the bench workload must look like perf record's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "tools.hpp"

namespace {

const std::string kRingcap = RINGCAP_BINARY;
const std::string kWorkload = RINGCAP_WORKLOAD;

// The top user-space symbol of `perf report --stdio --no-children --sort sym` and its share of the
// user-space samples: {share %, symbol}. Kernel-mode samples are left out: their share is what else
// the machine did meanwhile (another capture's real-time collectors preempting the workload put
// 9 % of its samples in finish_task_switch, irqentry_exit_to_user_mode and handle_softirqs), not
// what the collector recorded.
std::pair<double, std::string> top_symbol(const std::string& perf, const std::string& file) {
    auto r = run_command(perf + " report -i " + file + " --stdio --no-children --sort sym 2>/dev/null");
    std::istringstream in(r.output);
    std::smatch m;
    double user = 0, top = 0;
    std::string name;
    for (std::string line; std::getline(in, line);)
        if (std::regex_search(line, m, std::regex("^\\s+([0-9.]+)%\\s+\\[\\.\\]\\s+(\\S+)"))) {
            const double share = std::stod(m[1]);
            user += share;
            if (name.empty()) top = share, name = m[2];
        }
    return {user > 0 ? 100.0 * top / user : 0, name};
}

// Of the samples whose leaf is hot_loop, how many show caller_heavy/caller_light then main above it.
std::pair<int, int> chains(const std::string& perf, const std::string& file) {
    auto r = run_command(perf + " script -i " + file + " -F ip,sym 2>/dev/null");
    int hot = 0, full = 0;
    std::istringstream in(r.output);
    std::vector<std::string> frames;
    auto flush = [&] {
        if (!frames.empty() && frames[0].find("hot_loop") != std::string::npos) {
            ++hot;
            if (frames.size() >= 3 && frames[1].find("caller_") != std::string::npos &&
                frames[2].find("main") != std::string::npos)
                ++full;
        }
        frames.clear();
    };
    for (std::string line; std::getline(in, line);) {
        if (line.find_first_not_of(" \t") == std::string::npos) flush();
        else frames.push_back(line);
    }
    flush();
    return {hot, full};
}

// The workload's build-id, read independently from its ELF notes with readelf; skips without it.
std::string workload_build_id() {
    auto id = run_command("readelf -n " + kWorkload + " 2>/dev/null | sed -n 's/.*Build ID: *//p'");
    std::string want = id.output.substr(0, id.output.find('\n'));
    if (want.empty()) skip_test("readelf (binutils) is not installed or the workload has no build-id");
    return want;
}

// The host description in `perf report --header-only -I`, as lines to compare between two records of
// the same machine: node free memory dropped (it changes), pmu mappings sorted (perf lists them in
// the order it first looked them up, which depends on its events).
std::vector<std::string> host_lines(const std::string& hdr) {
    static const std::regex keep(
        "^# (cpudesc|cpuid|total memory|sibling (sockets|dies|threads)) *:.*|^# CPU [0-9]+: Core ID.*|"
        "^# node[0-9]+ (cpu list|meminfo) +:.*|^# CPU cache info:|^#  L[0-9].*|^# memory nodes .*|^# +[0-9]+ \\[.*");
    std::vector<std::string> out;
    std::istringstream in(hdr);
    for (std::string line; std::getline(in, line);) {
        if (line.starts_with("# pmu mappings: ")) {
            std::vector<std::string> pmus;
            std::istringstream items(line.substr(16));
            for (std::string item; std::getline(items, item, ',');) pmus.push_back(item.substr(item.find_first_not_of(' ')));
            std::sort(pmus.begin(), pmus.end());
            line = "# pmu mappings:";
            for (const auto& p : pmus) line += " " + p;
        } else if (!std::regex_match(line, keep)) {
            continue;
        }
        out.push_back(std::regex_replace(line, std::regex(", free = [0-9]+ kB"), ""));
    }
    return out;
}

// The words after "missing features:".
std::set<std::string> missing_features(const std::string& hdr) {
    std::set<std::string> out;
    const auto at = hdr.find("# missing features:");
    if (at == std::string::npos) return out;
    std::istringstream words(hdr.substr(at + 19, hdr.find('\n', at) - at - 19));
    for (std::string w; words >> w;) out.insert(w);
    return out;
}

}  // namespace

TEST_CASE("the workload's top symbol and share match perf record's", "[ecosystem]") {
    // Of the user-space samples (top_symbol): a concurrent test's capture moves the kernel's share.
    const std::string perf = require_kernel_and_perf();
    TempFile ours("eco-ours"), theirs("eco-perf");
    auto r = run_command(kRingcap + " record -F 2000 -o " + ours.path + " -- " + kWorkload + " 1500 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    REQUIRE(run_command(perf + " record -q -F 2000 -o " + theirs.path + " -- " + kWorkload + " 1500 2>&1").status == 0);
    auto a = top_symbol(perf, ours.path), b = top_symbol(perf, theirs.path);
    INFO("ringcap: " << a.second << " " << a.first << "%, perf: " << b.second << " " << b.first << "%");
    CHECK(a.second == "hot_loop");
    CHECK(a.second == b.second);
    CHECK(std::abs(a.first - b.first) < 5.0);
}

TEST_CASE("fp (-g) and dwarf call graphs show main -> caller -> hot_loop", "[ecosystem]") {
    const std::string perf = require_kernel_and_perf();
    TempFile f("eco-chain");
    for (const std::string mode : {"-g", "--call-graph dwarf"}) {
        INFO(mode);
        auto r = run_command(kRingcap + " record -F 2000 " + mode + " -o " + f.path + " -- " + kWorkload + " 1000 2>&1");
        INFO(r.output);
        REQUIRE(r.status == 0);
        auto [hot, full] = chains(perf, f.path);
        INFO("hot_loop samples " << hot << ", with the full chain " << full);
        REQUIRE(hot > 100);
        CHECK(full >= hot * 9 / 10);
    }
}

TEST_CASE("dwarf stacks trimmed to dyn_size: perf and hotspot unwind the chains of an untrimmed capture", "[ecosystem]") {
    const std::string perf = require_kernel_and_perf();
    TempFile trimmed("eco-trim"), whole("eco-whole");
    // The same workload twice: trimmed (the default) and copied whole. With an empty environment
    // its stack holds about a KiB above main, plus up to 8 KiB of random padding (the kernel's stack
    // randomization): of a 16 KiB dump, at most about 9 KiB is in use.
    std::map<std::string, uint64_t> bytes;
    std::map<std::string, std::pair<int, int>> got;
    for (const auto& [file, flag] : {std::pair{&trimmed, ""}, std::pair{&whole, " --no-stack-trim"}}) {
        auto r = run_command(kRingcap + " record -F 2000 --call-graph dwarf,16384" + flag + " -o " + file->path +
                             " -- env -i " + kWorkload + " 1000 2>&1");
        INFO(r.output);
        REQUIRE(r.status == 0);
        got[flag] = chains(perf, file->path);
        bytes[flag] = uint64_t(summary_value(r.output, "bytes")) / uint64_t(std::max(1LL, summary_value(r.output, "samples")));
        CHECK(perf_script_complaints(perf, file->path).empty());
    }
    const auto [hot_t, full_t] = got[""];
    const auto [hot_w, full_w] = got[" --no-stack-trim"];
    INFO("trimmed: " << full_t << " of " << hot_t << " hot_loop samples with main -> caller -> hot_loop, "
                     << bytes[""] << " bytes per sample; whole: " << full_w << " of " << hot_w << ", "
                     << bytes[" --no-stack-trim"] << " bytes per sample");
    REQUIRE(hot_t > 100);
    REQUIRE(hot_w > 100);
    // Nothing perf unwinds from was removed: as many complete chains as from whole stacks (two
    // captures of one workload, not the same samples: within 2 points).
    CHECK(double(full_t) / hot_t >= double(full_w) / hot_w - 0.02);
    CHECK(full_t >= hot_t * 9 / 10);
    CHECK(bytes[""] * 3 < bytes[" --no-stack-trim"] * 2);
    const std::string parser = "/usr/lib/x86_64-linux-gnu/libexec/hotspot-perfparser";
    if (access(parser.c_str(), X_OK) != 0) return;  // hotspot's own check is in fidelity_test.cpp
    auto p = run_command(parser + " --input " + trimmed.path + " --print-stats 2>&1");
    INFO(p.output.substr(0, 3000));
    CHECK(p.status == 0);
    CHECK(p.output.find("Event not fully parsed") == std::string::npos);
    std::smatch m;
    REQUIRE(std::regex_search(p.output, m, std::regex("\nsamples: (\\d+)")));
    CHECK(std::stoll(m[1]) == perf_report_stats(perf, trimmed.path).count("SAMPLE"));
}

TEST_CASE("a process started during the record is named and its symbols resolve", "[ecosystem]") {
    const std::string perf = require_kernel_and_perf();
    TempFile f("eco-late");
    // System-wide; the workload only starts once the record runs (it is exec'd by the shell later).
    auto r = run_command(kRingcap + " record -a -F 2000 -o " + f.path + " -- sh -c 'sleep 0.3; exec " + kWorkload +
                         " 800' 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    auto rep = run_command(perf + " report -i " + f.path + " --stdio --no-children --sort comm,sym 2>/dev/null");
    INFO(rep.output);
    CHECK(std::regex_search(rep.output, std::regex("ringcap_workloa\\s+\\[\\.\\]\\s+hot_loop")));
}

TEST_CASE("kernel samples resolve to kernel symbols", "[ecosystem]") {
    const std::string perf = require_kernel_and_perf();
    auto kallsyms = run_command("grep -m1 ' _text$' /proc/kallsyms");
    if (kallsyms.output.empty() || kallsyms.output.rfind("0000000000000000", 0) == 0)
        skip_test("/proc/kallsyms hides addresses here (kernel.kptr_restrict)");
    TempFile f("eco-kernel");
    auto r = run_command(kRingcap + " record -a -F 2000 --duration 0.5 -o " + f.path + " 2>&1");
    REQUIRE(r.status == 0);
    auto rep = run_command(perf + " report -i " + f.path + " --stdio --no-children --sort dso,sym 2>/dev/null");
    INFO(rep.output);
    // A named kernel function, not a raw address.
    CHECK(std::regex_search(rep.output, std::regex("\\[kernel\\.kallsyms\\]\\s+\\[k\\]\\s+[A-Za-z_]")));
}

TEST_CASE("sched:sched_switch: perf script prints the fields, counts comparable with perf record", "[ecosystem]") {
    const std::string perf = require_kernel_and_perf();
    TempFile ours("eco-sched"), theirs("eco-sched-perf");
    const std::string storm = " -- sh -c 'i=0; while [ $i -lt 300 ]; do sleep 0.001; i=$((i+1)); done'";
    auto r = run_command(kRingcap + " record -a -e sched:sched_switch -o " + ours.path + storm + " 2>&1");
    INFO(r.output);
    if (r.status == 2 && r.output.find("tracefs") != std::string::npos) skip_test("tracefs is not mounted");
    REQUIRE(r.status == 0);
    auto script = run_command(perf + " script -i " + ours.path + " 2>&1 | head -5");
    INFO(script.output);
    CHECK(script.output.find("prev_comm=") != std::string::npos);
    CHECK(script.output.find("next_pid=") != std::string::npos);
    REQUIRE(run_command(perf + " record -q -a -e sched:sched_switch -o " + theirs.path + storm + " 2>&1").status == 0);
    auto count = [&](const std::string& file) {
        return std::stoll(run_command(perf + " script -i " + file + " 2>/dev/null | wc -l").output);
    };
    const long long a = count(ours.path), b = count(theirs.path);
    INFO("ringcap " << a << " vs perf " << b);
    CHECK(a > 300);  // at least one switch per sleep
    CHECK(a * 10 > b);
    CHECK(b * 10 > a);
}

TEST_CASE("BUILD_ID lists the kernel and the binaries that ran, --no-buildid leaves it out", "[ecosystem]") {
    const std::string perf = require_kernel_and_perf();
    TempFile f("eco-buildid");
    auto r = run_command(kRingcap + " record -F 1000 -o " + f.path + " -- " + kWorkload + " 200 2>&1");
    REQUIRE(r.status == 0);
    auto hdr = run_command(perf + " report -i " + f.path + " --header-only 2>/dev/null");
    CHECK(hdr.output.find("missing features:") != std::string::npos);
    CHECK(std::regex_search(hdr.output, std::regex("missing features:[^\\n]*BUILD_ID")) == false);
    const std::string want = workload_build_id();
    auto list = run_command(perf + " buildid-list -i " + f.path + " 2>/dev/null");
    INFO(list.output);
    CHECK(list.output.find(want + " " + kWorkload) != std::string::npos);

    auto nb = run_command(kRingcap + " record -F 1000 --no-buildid -o " + f.path + " -- " + kWorkload + " 50 2>&1");
    REQUIRE(nb.status == 0);
    hdr = run_command(perf + " report -i " + f.path + " --header-only 2>/dev/null");
    CHECK(std::regex_search(hdr.output, std::regex("missing features:[^\\n]*BUILD_ID")));
}

TEST_CASE("compressed (-z): perf reads the compressed file: top symbol, call chains, build-ids (perf -z drops them)", "[ecosystem][compress]") {
    const std::string perf = require_kernel_and_perf();
    TempFile f("eco-z");
    auto r = run_command(kRingcap + " record -z --call-graph dwarf -F 2000 -o " + f.path + " -- " + kWorkload +
                         " 1500 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("compressed ") != std::string::npos);
    const auto top = top_symbol(perf, f.path);
    CHECK(top.second == "hot_loop");
    const auto [hot, full] = chains(perf, f.path);
    CHECK(hot > 100);
    CHECK(full * 10 >= hot * 9);
    auto hdr = run_command(perf + " report -i " + f.path + " --header-only 2>/dev/null");
    CHECK(hdr.output.find("compressed : Zstd, level = 1") != std::string::npos);
    const std::string want = workload_build_id();
    auto list = run_command(perf + " buildid-list -i " + f.path + " 2>/dev/null");
    INFO(list.output);
    CHECK(list.output.find(want + " " + kWorkload) != std::string::npos);
}

TEST_CASE("header sections: perf report --header -I shows what perf record writes", "[ecosystem][header]") {
    const std::string perf = require_kernel_and_perf();
    TempFile ours("eco-header"), theirs("eco-header-perf"), json("eco-header-json");
    REQUIRE(run_command(perf + " record -q -a -F 1000 -o " + theirs.path + " -- sleep 0.2 2>&1").status == 0);
    auto r = run_command(kRingcap + " record -a -F 1000 -o " + ours.path + " -- sleep 0.2 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    const auto want = run_command(perf + " report -i " + theirs.path + " --header-only -I 2>/dev/null").output;
    const auto got = run_command(perf + " report -i " + ours.path + " --header-only -I 2>/dev/null").output;
    INFO("perf record's header:\n" << want << "\nringcap's header:\n" << got);
    const auto want_lines = host_lines(want);
    CHECK(want_lines.size() >= 8);
    CHECK(host_lines(got) == want_lines);
    // Named only where perf itself could write them on this machine (perf has no CPUDESC on
    // aarch64, for one).
    const auto missing = missing_features(got), perf_missing = missing_features(want);
    for (const char* f : {"CPUDESC", "CPUID", "TOTAL_MEM", "CPU_TOPOLOGY", "NUMA_TOPOLOGY", "PMU_MAPPINGS", "CACHE",
                          "MEM_TOPOLOGY"}) {
        INFO(f);
        CHECK(missing.count(f) == perf_missing.count(f));
    }

    // perf data convert --to-json dereferences the CPU description: it crashed on files without it.
    auto conv = run_command(perf + " data convert --to-json " + json.path + " --force -i " + ours.path + " 2>&1");
    INFO(conv.output);
    CHECK(conv.status == 0);
    CHECK(run_command("python3 -c 'import json,sys; json.load(open(sys.argv[1]))' " + json.path + " 2>&1").status == 0);
}
