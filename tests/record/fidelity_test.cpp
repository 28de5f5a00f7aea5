// perf ecosystem fidelity: what perf record writes besides samples (task tree, names, maps, modifiers,
// BPF symbols, file mode), checked with the perf tool a user would run on the file.
#include <catch2/catch.hpp>

#include <iostream>

#include <sstream>
#include <algorithm>
#include <csignal>
#include <sys/stat.h>
#include <sys/wait.h>

#include "format/bpf_load.hpp"
#include "tools.hpp"

namespace {

const std::string kRingcap = RINGCAP_BINARY;
const std::string kWorkload = RINGCAP_WORKLOAD;

// Runs `ringcap record ARGS` and requires it to succeed; returns its stderr.
std::string record(const std::string& args) {
    auto r = run_command(kRingcap + " record " + args + " 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    return r.output;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

// The event names in the file's header, in order.
std::vector<std::string> event_names(const std::string& perf, const std::string& file) {
    std::vector<std::string> names;
    auto r = run_command(perf + " report -i " + file + " --header-only 2>/dev/null");
    for (const auto& l : lines_of(r.output)) {
        const auto at = l.find("# event : name = ");
        if (at == std::string::npos) continue;
        const auto from = at + 17;
        names.push_back(l.substr(from, l.find(',', from) - from));
    }
    return names;
}

}  // namespace

TEST_CASE("system-wide: every existing thread has its parent (perf report --tasks), names of 15 characters",
          "[fidelity]") {
    const std::string perf = require_kernel_and_perf();
    TempFile out("tasks");
    record("-a -F 200 -o " + out.path + " -- sleep 0.2");
    auto tasks = run_command(perf + " report -i " + out.path + " --tasks 2>/dev/null");
    INFO(tasks.output);
    REQUIRE(tasks.status == 0);
    // "pid tid ppid |comm": only the idle task (pid 0) has no parent, as in perf record's files.
    int rows = 0, orphans = 0;
    std::smatch m;
    for (const auto& l : lines_of(tasks.output)) {
        if (!std::regex_search(l, m, std::regex("^\\s*(-?\\d+)\\s+(-?\\d+)\\s+(-?\\d+)\\s"))) continue;
        ++rows;
        if (m[3] == "-1" && m[1] != "0") ++orphans;
    }
    CHECK(rows > 20);
    CHECK(orphans == 0);
    // The kernel's COMM records hold 15 characters (TASK_COMM_LEN); synthesized ones the same.
    auto comms = run_command(perf + " script -i " + out.path + " --show-task-events -F comm 2>/dev/null");
    size_t longest = 0;
    for (const auto& l : lines_of(comms.output)) {
        const auto at = l.find("PERF_RECORD_COMM: ");
        if (at == std::string::npos) continue;
        const auto name = l.substr(at + 18, l.rfind(':') - at - 18);
        longest = std::max(longest, name.size());
    }
    CHECK(longest > 0);
    CHECK(longest <= 15);
}

TEST_CASE("the file is created 0600, as perf's: a profile holds command lines and addresses", "[fidelity]") {
    require_kernel_and_perf();
    TempFile out("mode");
    std::remove(out.path.c_str());  // created by ringcap, not by mkstemp
    record("-a -F 100 -o " + out.path + " -- true");
    struct stat st{};
    REQUIRE(stat(out.path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("the default event is perf's cpu-clock:ppp", "[fidelity]") {
    const std::string perf = require_kernel_and_perf();
    TempFile out("default");
    record("-F 100 -o " + out.path + " -- true");
    const auto names = event_names(perf, out.path);
    REQUIRE(!names.empty());
    CHECK(names[0] == "cpu-clock:ppp");
}

TEST_CASE("modifiers: cpu-clock:u samples user space only, cpu-clock:k the kernel only", "[fidelity]") {
    const std::string perf = require_kernel_and_perf();
    // The workload runs in user space; dd copying /dev/zero to /dev/null mostly in the kernel.
    const std::string dd = "dd if=/dev/zero of=/dev/null bs=64k count=100000";
    for (const std::string mod : {"u", "k"}) {
        TempFile out("mod");
        record("-e cpu-clock:" + mod + " -F 2000 -o " + out.path + " -- " + (mod == "u" ? kWorkload + " 300" : dd));
        CHECK(event_names(perf, out.path).at(0) == "cpu-clock:" + mod);
        // Samples by DSO: the kernel's, or the program's and its libraries'.
        auto r = run_command(perf + " report -i " + out.path + " --stdio --sort dso 2>/dev/null");
        INFO(r.output);
        REQUIRE(r.status == 0);
        int kernel = 0, user = 0;
        std::smatch m;
        for (const auto& l : lines_of(r.output))
            if (std::regex_search(l, m, std::regex("^\\s+[0-9.]+%\\s+(\\S+)")))
                ++(m[1] == "[kernel.kallsyms]" ? kernel : user);
        if (mod == "u") CHECK((user > 0 && kernel == 0));
        else CHECK((kernel > 0 && user == 0));
    }
}

TEST_CASE("modifiers on tracepoints, and a tracepoint glob keeps tracefs's order as perf record", "[fidelity]") {
    const std::string perf = require_kernel_and_perf();
    const std::string root = run_command("ls -d /sys/kernel/tracing/events /sys/kernel/debug/tracing/events "
                                         "2>/dev/null | head -1").output;
    if (root.empty()) skip_test("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)");
    TempFile theirs("tp-perf"), ours("tp-ours");
    REQUIRE(run_command(perf + " record -q -e 'sched:sched_w*' -a -o " + theirs.path + " -- true 2>&1").status == 0);
    record("-e 'sched:sched_w*' -a -o " + ours.path + " -- true");
    auto want = event_names(perf, theirs.path), got = event_names(perf, ours.path);
    REQUIRE(want.size() > 2);
    want.pop_back();  // the tracking events differ in name: dummy:HG (perf), dummy:u
    got.pop_back();
    CHECK(got == want);
    TempFile mod("tp-mod");
    record("-e sched:sched_switch:k -a -o " + mod.path + " -- true");
    CHECK(event_names(perf, mod.path).at(0) == "sched:sched_switch");
    auto hdr = run_command(perf + " report -i " + mod.path + " --header-only 2>/dev/null").output;
    CHECK(hdr.find("exclude_user = 1") != std::string::npos);
}

TEST_CASE("modifiers perf has and ringcap does not are refused by name", "[fidelity]") {
    auto r = run_command(kRingcap + " record -e cpu-clock:S -a -o /dev/null -- true 2>&1");
    CHECK(r.status == 2);
    CHECK(r.output.find("modifier 'S'") != std::string::npos);
}

TEST_CASE("per task (-p): the [vsyscall] map is written, as perf record -p does", "[fidelity]") {
    const std::string perf = require_kernel_and_perf();
    TempFile out("vsys");
    const pid_t child = fork();  // a task to attach to
    REQUIRE(child >= 0);
    if (child == 0) {
        execlp("sleep", "sleep", "30", nullptr);
        _exit(127);
    }
    const std::string rec = run_command(kRingcap + " record -p " + std::to_string(child) +
                                        " -F 100 --duration 0.2 -o " + out.path + " 2>&1").output;
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    INFO(rec);
    auto maps = run_command(perf + " script -i " + out.path + " --show-mmap-events 2>/dev/null");
    CHECK(maps.output.find("[vsyscall]") != std::string::npos);
}

TEST_CASE("BPF programs loaded during a capture: KSYMBOL and BPF_EVENT records (perf script --show-bpf-events)",
          "[fidelity]") {
    const std::string perf = require_kernel_and_perf();
    // Loads a two-instruction socket filter (r0 = 0; exit) with bpf(BPF_PROG_LOAD) and keeps it a moment.
    const std::string loader =
        "import ctypes,struct,sys\n"
        "libc=ctypes.CDLL(None,use_errno=True)\n"
        "ins=ctypes.create_string_buffer(struct.pack('<BBhiBBhi',0xb7,0,0,0,0x95,0,0,0))\n"
        "lic=ctypes.create_string_buffer(b'GPL')\n"
        "attr=ctypes.create_string_buffer(struct.pack('<IIQQIIQII',1,2,ctypes.addressof(ins),"
        "ctypes.addressof(lic),0,0,0,0,0)+bytes(80))\n"
        "fd=libc.syscall(321,5,attr,len(attr.raw))\n"
        "sys.exit(0 if fd>=0 else 3)\n";
    TempFile script("bpf-py");
    {
        std::ofstream f(script.path);
        f << loader;
    }
    if (run_command("python3 " + script.path).status != 0)
        skip_test("this kernel or user cannot load a BPF program (bpf(BPF_PROG_LOAD) refused, or no python3)");
    TempFile out("bpf");
    record("-a -F 100 -o " + out.path + " -- python3 " + script.path);
    auto r = run_command(perf + " script -i " + out.path + " --show-bpf-events 2>/dev/null");
    INFO(r.output.substr(0, 4000));
    CHECK(r.output.find("PERF_RECORD_KSYMBOL") != std::string::npos);
    CHECK(r.output.find("PERF_RECORD_BPF_EVENT") != std::string::npos);
}

TEST_CASE("PMU_CAPS, BPF_PROG_INFO, BPF_BTF and a loaded program's KSYMBOL/BPF_EVENT: as perf record writes them",
          "[fidelity][bpf]") {
    const std::string perf = require_kernel_and_perf();
    std::string why;
    auto loaded = ringcap::testing::load_test_bpf(&why);  // loaded across both records
    if (!loaded) skip_test("cannot load a BPF program here (" + why + ")");
    TempFile ours("feat-ours"), theirs("feat-perf");
    record("-a -F 100 --duration 0.2 -o " + ours.path);
    REQUIRE(run_command(perf + " record -q -a -F 100 -o " + theirs.path + " -- sleep 0.2 2>&1").status == 0);
    auto header = [&](const std::string& file) {
        return run_command(perf + " report -i " + file + " --header-only -I 2>&1").output;
    };
    const std::string a = header(ours.path), b = header(theirs.path);
    INFO("ringcap:\n" << a << "\nperf:\n" << b);
    // Our program, described alike (its id, the name from its BTF, address and size), and its BTF.
    auto line_of = [](const std::string& text, const std::string& prefix) {
        const auto at = text.find(prefix);
        return at == std::string::npos ? std::string("(none)") : text.substr(at, text.find('\n', at) - at);
    };
    const std::string prog = "# bpf_prog_info " + std::to_string(loaded->prog_id) + ":";
    CHECK(line_of(a, prog).find("_ringcap_f addr 0x") != std::string::npos);
    CHECK(line_of(a, prog) == line_of(b, prog));
    const std::string btf = "# btf info of id " + std::to_string(loaded->btf_id) + "\n";
    CHECK(a.find(btf) != std::string::npos);
    CHECK(b.find(btf) != std::string::npos);
    // The PMU capabilities perf lists, and the same features present or missing.
    auto caps = [&](const std::string& text) {
        std::string out;
        for (const auto& l : lines_of(text))
            if (l.find(" pmu capabilities: ") != std::string::npos) out += l + "\n";
        return out;
    };
    CHECK(caps(a) == caps(b));
    const auto missing_a = line_of(a, "# missing features:"), missing_b = line_of(b, "# missing features:");
    for (const char* feat : {" BPF_PROG_INFO", " BPF_BTF", " CPU_PMU_CAPS", " PMU_CAPS"}) {
        INFO(feat);
        CHECK((missing_a.find(feat) == std::string::npos) == (missing_b.find(feat) == std::string::npos));
    }
    CHECK(missing_a.find(" BPF_PROG_INFO") == std::string::npos);
    CHECK(missing_a.find(" PMU_CAPS") == std::string::npos);
    // The records perf synthesizes for a program loaded before the start: its KSYMBOL (address,
    // length, the name from its BTF) and its BPF_EVENT (PROG_LOAD, its id), alike in both files.
    auto bpf_records = [&](const std::string& file) {
        std::string out;
        for (const auto& l : lines_of(run_command(perf + " script -i " + file + " --show-bpf-events 2>/dev/null").output)) {
            const auto at = l.find("PERF_RECORD_");
            if (at == std::string::npos) continue;
            const std::string rec = l.substr(at);
            if (rec.find("_ringcap_f") != std::string::npos || rec.ends_with("id " + std::to_string(loaded->prog_id)))
                out += rec + "\n";
        }
        return out;
    };
    const std::string ours_bpf = bpf_records(ours.path);
    INFO(ours_bpf);
    CHECK(ours_bpf.find("PERF_RECORD_KSYMBOL addr ") != std::string::npos);
    CHECK(ours_bpf.find("PERF_RECORD_BPF_EVENT type 1, flags 0, id " + std::to_string(loaded->prog_id)) !=
          std::string::npos);
    CHECK(ours_bpf == bpf_records(theirs.path));
}

TEST_CASE("ID_INDEX, THREAD_MAP, CPU_MAP and FINISHED_INIT open the data, as perf record writes them", "[fidelity]") {
    const std::string perf = require_kernel_and_perf();
    TempFile out("maps");
    record("-a -F 100 -o " + out.path + " -- true");
    const PerfStats st = perf_report_stats(perf, out.path);
    for (const char* type : {"ID_INDEX", "THREAD_MAP", "CPU_MAP", "FINISHED_INIT"}) {
        INFO(type);
        CHECK(st.count(type) >= 1);
    }
    // The index names every event id of the header, with its CPU; a system-wide map has thread -1.
    auto dump = run_command(perf + " report -i " + out.path + " -D 2>/dev/null").output;
    std::smatch m;
    size_t ids = 0;
    for (const auto& l : lines_of(run_command(perf + " report -i " + out.path + " --header-only").output))
        if (l.find("# event : ") != std::string::npos && std::regex_search(l, m, std::regex("id = \\{ ([^}]*)\\}")))
            ids += size_t(std::count(m[1].first, m[1].second, ',') + 1);
    REQUIRE(std::regex_search(dump, m, std::regex("PERF_RECORD_ID_INDEX nr: (\\d+)")));
    CHECK(std::stoul(m[1]) == ids);
    CHECK(dump.find("PERF_RECORD_THREAD_MAP nr: 1 thread: -1") != std::string::npos);
    CHECK(std::regex_search(dump, std::regex("PERF_RECORD_CPU_MAP: \\S")));
}

TEST_CASE("SAMPLE_TIME: perf report --time in percent and perf script --time 10%/1 select samples", "[fidelity]") {
    const std::string perf = require_kernel_and_perf();
    TempFile out("times");
    record("-a -F 1000 -o " + out.path + " -- " + kWorkload + " 600");
    auto hdr = run_command(perf + " report -i " + out.path + " --header-only 2>/dev/null").output;
    CHECK(hdr.find("# time of first sample : ") != std::string::npos);
    CHECK(hdr.find("# time of last sample : ") != std::string::npos);
    auto count = [&](const std::string& opts) {
        auto r = run_command(perf + " script -i " + out.path + " " + opts + " -F time 2>&1");
        INFO(r.output.substr(0, 2000));
        CHECK(r.status == 0);
        CHECK(r.output.find("first/last sample time") == std::string::npos);
        return std::count(r.output.begin(), r.output.end(), '\n');
    };
    const auto all = count(""), half = count("--time 0%-50%"), tenth = count("--time 10%/1");
    CHECK(all > 100);
    CHECK(half > 0);
    CHECK(half < all);
    CHECK(tenth > 0);
    CHECK(tenth < half);
    auto rep = run_command(perf + " report -i " + out.path + " --time 0%-50% --stdio 2>&1");
    CHECK(rep.status == 0);
    CHECK(rep.output.find("no first/last sample time found") == std::string::npos);
}

TEST_CASE("build-id cache: perf report still names the functions after the binary is replaced, -N leaves it out",
          "[fidelity][buildid]") {
    const std::string perf = require_kernel_and_perf();
    // A private HOME (perf and ringcap both use $HOME/.debug) and a copy of the workload we can replace.
    char tmpl[] = "/tmp/ringcap-home-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    const std::string home = tmpl, wl = home + "/workload";
    REQUIRE(run_command("cp " + kWorkload + " " + wl).status == 0);
    const std::string env = "HOME=" + home + " ";
    auto top = [&](const std::string& file) {
        return run_command(env + perf + " report -i " + file + " --stdio --no-children --sort sym 2>/dev/null").output;
    };
    const std::string cached = home + "/cached.data", uncached = home + "/uncached.data";
    REQUIRE(run_command(env + kRingcap + " record -N -F 2000 -o " + uncached + " -- " + wl + " 300 2>&1").status == 0);
    struct stat st{};
    CHECK(stat((home + "/.debug").c_str(), &st) != 0);  // -N: no cache
    REQUIRE(run_command(env + kRingcap + " record -F 2000 -o " + cached + " -- " + wl + " 300 2>&1").status == 0);
    CHECK(top(cached).find("hot_loop") != std::string::npos);
    // The workload is rebuilt: same path, other contents (and build-id).
    REQUIRE(run_command("rm " + wl + " && cp /bin/true " + wl).status == 0);
    const std::string after = top(cached);
    INFO(after.substr(0, 3000));
    CHECK(after.find("hot_loop") != std::string::npos);
    // perf's layout: <cache>/.build-id/xx/... -> ../../<path>/<id>, with the vDSO and the kernel too.
    CHECK(run_command("ls " + home + "/.debug/.build-id/*/* >/dev/null 2>&1").status == 0);
    CHECK(run_command("ls '" + home + "/.debug/[vdso]'/*/vdso >/dev/null 2>&1").status == 0);
    auto ids = run_command(env + perf + " buildid-list -i " + cached + " 2>/dev/null").output;
    CHECK(ids.find("[vdso]") != std::string::npos);
    run_command("rm -rf " + home);
}

TEST_CASE("build-id cache: --buildid-cache-max bounds what a record copies into it and says what it left out",
          "[fidelity][buildid]") {
    require_kernel();
    TempDir home("cachemax");
    // A record's largest copy is /proc/kallsyms (text, some MB); the ELF files on /tmp's filesystem
    // are hard links, which take no room.
    const uint64_t cap = 64 << 10;
    if (read_file("/proc/kallsyms").size() <= cap) skip_test("/proc/kallsyms is smaller than the 64 KiB cap tried");
    auto r = run_command("HOME=" + home.path + " " + kRingcap + " record -a -F 100 --duration 0.2 --buildid-cache-max 64K -o " +
                         home.path + "/p.data 2>&1");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("over --buildid-cache-max (64.00 KiB,") != std::string::npos);
    const auto du = run_command("find " + home.path + "/.debug -type f -links 1 -printf '%s\\n' | awk '{s+=$1} END {print s+0}'");
    std::cout << "INFO: --buildid-cache-max 64K: the cache's copies take " << du.output;
    CHECK(std::stoull(du.output) <= cap);
}

TEST_CASE("hotspot's perfparser reads every sample in time order, with no warning about our records", "[fidelity][hotspot]") {
    const std::string perf = require_kernel_and_perf();
    const std::string parser = "/usr/lib/x86_64-linux-gnu/libexec/hotspot-perfparser";
    if (access(parser.c_str(), X_OK) != 0)
        skip_test("hotspot is not installed (apt-get install hotspot): cannot check hotspot's own parser");
    TempFile out("hotspot");
    record("-a -F 1000 --call-graph dwarf -o " + out.path + " -- " + kWorkload + " 300");
    auto r = run_command(parser + " --input " + out.path + " --print-stats 2>&1");
    INFO(r.output.substr(0, 4000));
    REQUIRE(r.status == 0);
    std::smatch m;
    REQUIRE(std::regex_search(r.output, m, std::regex("\nsamples: (\\d+)")));
    CHECK(std::stoll(m[1]) == perf_report_stats(perf, out.path).count("SAMPLE"));
    CHECK(r.output.find("samples time violations: 0") != std::string::npos);
    CHECK(r.output.find("mmaps time violations: 0") != std::string::npos);
    CHECK(r.output.find("FINISHED_ROUND with non-zero content") == std::string::npos);
    CHECK(r.output.find("Event not fully parsed") == std::string::npos);
    // Its reader of CPU_TOPOLOGY, CACHE, MEM_TOPOLOGY and SAMPLE_TIME predates perf 6.1's layout: it
    // says "feature not properly read" for those of perf record's files too, and reads on.
    // What it does not know it names: perf record's own files draw the same (FINISHED_INIT 82,
    // ID_INDEX 69, THREAD_MAP 73, CPU_MAP 74); hotspot 1.3.0's parser handles 11 record types.
    for (const auto& l : lines_of(r.output))
        if (l.find("unhandled event type") != std::string::npos)
            CHECK(std::regex_search(l, std::regex("unhandled event type (82|69|73|74)\\b")));
}
