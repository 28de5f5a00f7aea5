// --switch-output, --switch-max-files, --max-size: rotated files each stand alone and add up to the
// summary; --max-size stops before the file would pass SIZE. Every file is read back by perf.
#include <catch2/catch.hpp>

#include <csignal>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spawn.hpp"
#include "tools.hpp"

using namespace ringcap;
using namespace ringcap_test;

namespace {

// The rotated files of `out` (<out>.<16 digits>), in name (= time) order.
std::vector<std::string> rotated(const std::string& dir, const std::string& base) {
    std::vector<std::string> files;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d)) {
            const std::string n = e->d_name;
            if (n.size() == base.size() + 17 && n.rfind(base + ".", 0) == 0 &&
                n.find_first_not_of("0123456789", base.size() + 1) == std::string::npos)
                files.push_back(dir + "/" + n);
        }
        closedir(d);
    }
    std::sort(files.begin(), files.end());
    return files;
}

uint64_t file_size(const std::string& path) {
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

// Every sample's comm in a file, as perf script resolves it: a file that does not stand alone shows
// ":PID" names (no COMM record for the thread).
std::string unnamed_samples(const std::string& perf, const std::string& path) {
    auto r = run_command(perf + " script -F comm,pid -i " + path + " 2>/dev/null | awk '$1 ~ /^:[0-9]+$/' | head -3");
    return r.output;
}

// The sample count the dump line of `file` gives ("[ dump FILE ] 1.00 MiB of data, N samples"), or -1.
long long dump_samples(const std::string& log, const std::string& file) {
    const size_t at = log.find("[ dump " + file + " ]");
    if (at == std::string::npos) return -1;
    const size_t end = log.find('\n', at);
    const std::string line = log.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const size_t comma = line.rfind(", "), word = line.rfind(" samples");
    if (comma == std::string::npos || word == std::string::npos || word < comma) return -1;
    return std::stoll(line.substr(comma + 2, word - comma - 2));
}

}  // namespace

TEST_CASE("switch-output by time under busy CPUs: each file stands alone, its dump line counts its samples, the files add up to the summary",
          "[rotation]") {
    const std::string perf = require_kernel_and_perf();
    // With -z, what is still being compressed at a switch goes to the next file: the counts follow.
    const bool z = GENERATE(false, true);
    INFO((z ? "-z" : "uncompressed"));
    TempDir dir("rot");
    const std::string out = dir.path + "/perf.data", json = dir.path + "/summary.json";
    std::vector<std::string> args = {"record", "-a",           "-F", "4000", "-g", "--switch-output=1s", "--duration",
                                     "3.5",    "-o",           out,  "--json", json};
    if (z) args.push_back("-z");
    args.insert(args.end(), kBusy.begin(), kBusy.end());
    const Running r = spawn(args, dir.path + "/log");
    const int rc = wait_exit(r);
    const std::string log = read_file(r.log);
    INFO(log);
    REQUIRE(rc == 0);
    const auto files = rotated(dir.path, "perf.data");
    // A switch a second for 3.5 s (the command may end it sooner, never before the first switch).
    REQUIRE(files.size() >= 2);
    CHECK(access(out.c_str(), F_OK) != 0);  // as perf: the last file is named like the others
    long long samples = 0;
    for (const auto& f : files) {
        INFO(f);
        const PerfStats st = perf_report_stats(perf, f);
        CHECK(st.status == 0);
        // The last file may be empty: when a switch came late (a busy machine) and the record
        // stopped right after it, it holds only the records of what runs.
        const bool last = &f == &files.back();
        if (!last || st.count("SAMPLE") > 0 || dump_samples(log, f) != 0) CHECK(st.count("SAMPLE") > 0);
        CHECK(st.count("COMM") > 0);   // the records of what runs, in every file
        CHECK(st.count("MMAP2") > 0);
        samples += st.count("SAMPLE");
        CHECK(dump_samples(log, f) == st.count("SAMPLE"));  // the dump line says what is in it
        CHECK(unnamed_samples(perf, f) == "");
        CHECK(perf_script_complaints(perf, f) == "");
        // Its own time range: perf script --time with percentages finds samples in it.
        if (st.count("SAMPLE") == 0) continue;
        auto half = run_command(perf + " script -i " + f + " --time 0%-50% 2>&1 | wc -l");
        CHECK(std::stoll(half.output) > 0);
    }
    // Nothing lost or counted twice across the switches.
    CHECK(samples == summary_value(log, "samples"));
    CHECK(summary_value(log, "lost") == 0);
    CHECK(log.find("[ dump " + files.front() + " ]") != std::string::npos);
    // The JSON lists the files.
    auto j = run_command("python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(len(j[\"files\"]), "
                         "j[\"samples\"])' " + json);
    CHECK(j.output == std::to_string(files.size()) + " " + std::to_string(samples) + "\n");
}

TEST_CASE("switch-output of a command's own events: every file names it and its child, and maps them", "[rotation]") {
    const std::string perf = require_kernel_and_perf();
    // Per task, no /proc scan describes the command: its exec's COMM and MMAP2 (and its child's
    // FORK) are in the first file only. The later files get them from what the collectors copied.
    TempDir dir("rot");
    const std::string out = dir.path + "/perf.data";
    std::vector<std::string> args = {"record", "-F", "1000", "--switch-output=1s", "--duration", "2.5", "-o", out};
    args.insert(args.end(), kBusy.begin(), kBusy.end());
    const Running r = spawn(args, dir.path + "/log");
    const int rc = wait_exit(r);
    INFO(read_file(r.log));
    REQUIRE(rc == 0);
    const auto files = rotated(dir.path, "perf.data");
    REQUIRE(files.size() >= 2);
    for (const auto& f : files) {
        INFO(f);
        const PerfStats st = perf_report_stats(perf, f);
        CHECK(st.count("COMM") > 0);
        CHECK(st.count("MMAP2") > 0);
        CHECK(unnamed_samples(perf, f) == "");
        CHECK(perf_script_complaints(perf, f) == "");
        // Its samples resolve to the shell's files (its mappings are there), as in the first file:
        // the parent's and the forked child's (which never execs: it has its parent's mappings) alike.
        if (st.count("SAMPLE") == 0) continue;
        auto in_files = run_command(perf + " script -F ip,dso -i " + f + " 2>/dev/null | grep -c ' (/'");
        CHECK(std::stoll(in_files.output) > 0);
        // Any user-space sample left [unknown], with its pid (kernel addresses start ffff).
        auto unresolved = run_command(perf + " script -F pid,ip,dso -i " + f +
                                      " 2>/dev/null | awk '$2 !~ /^ffff/ && $3 == \"([unknown])\"' | head -3");
        CHECK(unresolved.output == "");
    }
}

TEST_CASE("switch-output on SIGUSR2 with switch-max-files and -z: the newest files are kept, perf reads them",
          "[rotation]") {
    const std::string perf = require_kernel_and_perf();
    TempDir dir("rot");
    const std::string out = dir.path + "/perf.data";
    const Running r = spawn({"record", "-a", "-F", "2000", "-z", "--switch-output", "--switch-max-files=2", "-o", out},
                            dir.path + "/log");
    // Published once set up (SIGUSR2 is watched before that); each switch names a file.
    REQUIRE(eventually([&] { return header_data_size(out) > 0; }));
    for (size_t n = 1; n <= 3; ++n) {
        REQUIRE(kill(r.pid, SIGUSR2) == 0);
        // A switch is done when the previous file got its name (and the next SIGUSR2 starts another).
        REQUIRE(eventually([&] {
            const std::string l = read_file(r.log);
            size_t dumps = 0;
            for (size_t p = l.find("[ dump "); p != std::string::npos; p = l.find("[ dump ", p + 1)) ++dumps;
            return dumps == n;
        }));
    }
    REQUIRE(kill(r.pid, SIGINT) == 0);
    CHECK(wait_exit(r) == 0);
    const std::string log = read_file(r.log);
    INFO(log);
    // Four files written (three switches and the end), the two oldest removed.
    const auto files = rotated(dir.path, "perf.data");
    CHECK(files.size() == 2);
    CHECK(log.find("removed ") != std::string::npos);
    for (const auto& f : files) {
        INFO(f);
        auto s = run_command(perf + " script -i " + f + " 2>&1 >/dev/null");
        CHECK(s.status == 0);
        CHECK(s.output == "");
        auto n = run_command(perf + " script -i " + f + " 2>/dev/null | wc -l");
        CHECK(std::stoll(n.output) > 0);
        CHECK(dump_samples(log, f) == std::stoll(n.output));
    }
}

TEST_CASE("max-size stops before the file would pass SIZE, exit status 0, and says why", "[rotation]") {
    const std::string perf = require_kernel_and_perf();
    TempDir dir("rot");
    const std::string out = dir.path + "/perf.data", json = dir.path + "/summary.json";
    const uint64_t limit = 24ull << 20;
    std::vector<std::string> args = {"record", "-a", "-F", "4000", "--call-graph", "dwarf", "--max-size", "24M",
                                     "-o",     out,  "--json", json};
    args.insert(args.end(), kBusy.begin(), kBusy.end());
    const Running r = spawn(args, dir.path + "/log");
    const int rc = wait_exit(r);
    const std::string log = read_file(r.log);
    INFO(log);
    CHECK(rc == 0);
    CHECK(log.find("stopped (--max-size 24.00 MiB reached)") != std::string::npos);
    const uint64_t size = file_size(out);
    CHECK(size <= limit);
    CHECK(size > limit / 2);
    const PerfStats st = perf_report_stats(perf, out);
    CHECK(st.status == 0);
    // Everything read is in the file, or counted.
    auto j = run_command("python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j[\"samples\"] - "
                         "j[\"dropped\"], j[\"stop_reason\"], j[\"exit_code\"])' " + json);
    CHECK(j.output == std::to_string(st.count("SAMPLE")) + " --max-size 24.00 MiB reached 0\n");
}

TEST_CASE("max-size too small for the header and features is refused before anything is written", "[rotation]") {
    require_kernel();
    TempDir dir("rot");
    const std::string out = dir.path + "/perf.data";
    auto r = run_command(kRingcap + " record -a --duration 1 --max-size 8K -o " + out + " 2>&1");
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find("--max-size 8.00 KiB is too small") != std::string::npos);
    CHECK(access(out.c_str(), F_OK) != 0);
    CHECK(rotated(dir.path, "perf.data").empty());
}
