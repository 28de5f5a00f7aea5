// What a batch job meets: special and shared outputs, resource limits, memory cgroups, a user without
// privileges, a closed stderr, the recorded command's failure, throttling, losses, unmounting after.
// Each case runs the ringcap binary in a child and reads the file with perf.
#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <grp.h>
#include <regex>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>

#include "record/spawn.hpp"
#include "ringcap/sys.hpp"
#include "testkit/perf_data_reader.hpp"
#include "tools.hpp"

using namespace ringcap_test;

namespace {


// Sets a sysctl for the test's lifetime (root only; skips loudly otherwise).
struct Sysctl {
    std::string path, old;
    Sysctl(const std::string& name, const std::string& value) : path("/proc/sys/" + name) {
        old = read_file(path);
        std::ofstream out(path);
        out << value;
        out.flush();
        if (!out) skip_test("cannot set " + name + " (needs root)");
    }
    ~Sysctl() { std::ofstream(path) << old; }
};

// A memory cgroup with a limit, v1 or v2, removed at the end; skips loudly where none can be made.
struct MemoryCgroup {
    std::string dir, procs;
    explicit MemoryCgroup(const std::string& limit) {
        const std::string name = "/ringcap-test-" + std::to_string(getpid());
        if (::access("/sys/fs/cgroup/memory", W_OK) == 0 && mkdir(("/sys/fs/cgroup/memory" + name).c_str(), 0755) == 0) {
            dir = "/sys/fs/cgroup/memory" + name;
            std::ofstream(dir + "/memory.limit_in_bytes") << limit;
        } else if (read_file("/sys/fs/cgroup/cgroup.subtree_control").find("memory") != std::string::npos &&
                   mkdir(("/sys/fs/cgroup" + name).c_str(), 0755) == 0) {
            dir = "/sys/fs/cgroup" + name;
            std::ofstream(dir + "/memory.max") << limit;
        } else {
            skip_test("no memory cgroup can be created here (needs root and a memory controller)");
        }
        procs = dir + "/cgroup.procs";
    }
    ~MemoryCgroup() { rmdir(dir.c_str()); }  // empty again once the child exited
};

}  // namespace

TEST_CASE("devices and FIFOs given as -o are refused (exit 2) and never replaced", "[unattended]") {
    require_kernel();
    TempDir d("open", 0777);
    const std::string chr = d.path + "/null", fifo = d.path + "/fifo";
    if (mknod(chr.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) skip_test("mknod needs root");
    REQUIRE(mkfifo(fifo.c_str(), 0666) == 0);
    for (const auto& [out, kind] : {std::pair{chr, "a character device"}, std::pair{fifo, "a FIFO"}}) {
        auto r = run_command(kRingcap + " record -a --duration 0.2 -o " + out + " 2>&1");
        INFO(r.output);
        CHECK(r.status == 2);
        CHECK(r.output.find(std::string("is ") + kind + ": ringcap writes perf.data to a regular file") !=
              std::string::npos);
        struct stat st{};
        REQUIRE(lstat(out.c_str(), &st) == 0);
        CHECK((S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)));
        CHECK(stat((out + ".old").c_str(), &st) != 0);
    }
}

TEST_CASE("records to one -o at once: one writes it, the others exit 2 at once and touch nothing", "[unattended]") {
    require_kernel();
    const std::string perf = require_perf();
    TempDir d("open", 0777);
    const std::string out = d.path + "/perf.data";
    std::vector<Running> runs;
    std::vector<std::unique_ptr<TempFile>> logs;
    // Long records, ended by SIGINT once the others are done: however slowly each starts (ASan, a
    // loaded machine), the four overlap.
    for (int i = 0; i < 4; ++i) {
        logs.push_back(std::make_unique<TempFile>("concurrent-log"));
        runs.push_back(spawn({"record", "-a", "-F", "1000", "--duration", "120", "-o", out}, logs.back()->path));
    }
    std::vector<int> rcs(runs.size(), -1);
    auto reap = [&] {
        size_t exited = 0;
        for (size_t i = 0; i < runs.size(); ++i) {
            int status = 0;
            if (rcs[i] < 0 && waitpid(runs[i].pid, &status, WNOHANG) == runs[i].pid)
                rcs[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            exited += rcs[i] >= 0;
        }
        return exited;
    };
    CHECK(eventually([&] { return reap() >= runs.size() - 1; }));  // all but one refused
    REQUIRE(eventually([&] { return header_data_size(out) > 0; }));  // the winner published
    for (size_t i = 0; i < runs.size(); ++i)
        if (rcs[i] < 0) {
            kill(runs[i].pid, SIGINT);
            rcs[i] = wait_exit(runs[i]);
        }
    int ok = 0, refused = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
        const int rc = rcs[i];
        const std::string text = read_file(logs[i]->path);
        INFO(text);
        if (rc == 0) ++ok;
        if (rc == 2 && text.find("another ringcap is writing '") != std::string::npos &&
            std::count(text.begin(), text.end(), '\n') == 1)
            ++refused;
    }
    CHECK(ok == 1);
    CHECK(refused == 3);
    CHECK(perf_report_stats(perf, out).ok());
    struct stat st{};
    CHECK(stat((out + ".old").c_str(), &st) != 0);  // nobody moved the winner's file away
    CHECK(leftover_temporaries(out) == 0);

    // A record that starts while another one is writing the file is refused before it does anything.
    Running first = spawn({"record", "-a", "-F", "1000", "--duration", "120", "-o", out}, logs[0]->path);
    REQUIRE(eventually([&] { return header_data_size(out) > 0 && read_file(out + ".old").size() > 0; }));
    auto second = run_command(kRingcap + " record -a --duration 0.2 -o " + out + " 2>&1");
    CHECK(second.status == 2);
    CHECK(second.output.find("another ringcap is writing '" + out + "'") != std::string::npos);
    kill(first.pid, SIGINT);
    CHECK(wait_exit(first) == 0);
    CHECK(perf_report_stats(perf, out).ok());
}

TEST_CASE("RLIMIT_FSIZE: no SIGXFSZ death, the file keeps what fit, exit 1 naming the limit", "[unattended]") {
    require_kernel();
    const std::string perf = require_perf();
    TempDir d("open", 0777);
    const std::string out = d.path + "/perf.data";
    TempFile log("fsize-log");
    constexpr rlim_t kLimit = 2 << 20;
    std::vector<std::string> args{"record", "-a", "-F", "10000", "--call-graph", "dwarf", "-o", out};
    args.insert(args.end(), kBusy.begin(), kBusy.end());
    Running r = spawn(args, log.path, [] {
        rlimit rl{kLimit, kLimit};
        setrlimit(RLIMIT_FSIZE, &rl);
    });
    const int rc = wait_exit(r);
    const std::string text = read_file(log.path);
    INFO(text);
    CHECK(rc == 1);
    CHECK(text.find("File too large (EFBIG) (the file reached RLIMIT_FSIZE") != std::string::npos);
    std::smatch m;
    REQUIRE(std::regex_search(text, m, std::regex("kept ([0-9]+) bytes of data")));
    CHECK(std::stoull(m[1]) >= (kLimit - 4096) * 95 / 100);
    const PerfStats stats = perf_report_stats(perf, out);
    INFO(stats.output);
    CHECK(stats.ok());
    CHECK(stats.count("SAMPLE") > 0);
}

TEST_CASE("a memory cgroup limit: staging is sized to fit (8-16 MiB, also with -z) or left alone (1 GiB), never killed",
          "[unattended]") {
    require_kernel();
    const std::string perf = require_perf();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip_test("built with a sanitizer: its shadow memory alone is more than an 8 MiB cgroup allows");
#endif
    // With -z (at a rate that fills every buffer: it was killed at 16 MiB before -z's buffers counted).
    for (const std::string limit : {"8M", "16M", "1G", "16M -z"}) {
        INFO("memory limit " << limit);
        const bool z = limit.find("-z") != std::string::npos;
        MemoryCgroup cg(limit.substr(0, limit.find(' ')));
        TempDir d("open", 0777);
        const std::string out = d.path + "/perf.data";
        TempFile log("memcg-log");
        std::vector<std::string> args{"record", "-a", "-F", z ? "20000" : "4000", "--call-graph", "dwarf",
                                      "--duration", "1", "-o", out};
        if (z) {
            args.push_back("-z");
            args.insert(args.end(), kBusy.begin(), kBusy.end());
        }
        Running r = spawn(args, log.path, [&] { std::ofstream(cg.procs) << getpid() << std::endl; });
        const int rc = wait_exit(r);
        const std::string text = read_file(log.path);
        INFO(text);
        CHECK(rc == 0);
        const bool fitted = text.find("the memory cgroup limit is ") != std::string::npos;
        CHECK(fitted == (limit != "1G"));  // 1 GiB takes the most staging there is (256 MiB)
        if (z) CHECK(text.find("with what -z needs besides") != std::string::npos);
        CHECK(perf_report_stats(perf, out).ok());
    }
}

TEST_CASE("a user without privileges at perf_event_paranoid=2 records its command in user space", "[unattended]") {
    require_kernel();
    const std::string perf = require_perf();
    if (getuid() != 0) skip_test("needs root to switch to another user");
    Sysctl paranoid("kernel/perf_event_paranoid", "2");
    TempDir d("open", 0777);
    const std::string out = d.path + "/perf.data";
    TempFile log("user-log");
    chmod(log.path.c_str(), 0666);
    Running r = spawn({"record", "-v", "-F", "1000", "-o", out, "--", RINGCAP_WORKLOAD, "300"}, log.path, become_nobody);
    const int rc = wait_exit(r);
    const std::string text = read_file(log.path);
    INFO(text);
    REQUIRE(rc != 126);
    CHECK(rc == 0);
    CHECK(text.find("allows this user user-space samples only: recording them") != std::string::npos);
    CHECK(text.find("event cpu-clock:pppu: samples ") != std::string::npos);  // perf's naming
    CHECK(summary_value(text, "samples") > 0);
    // The collector's default nice is out of reach: it says so (-v) and records at the workload's.
    CHECK(text.find("nice 0: setpriority(-5): Permission denied (EACCES) (a negative nice needs root or "
                    "CAP_SYS_NICE, or RLIMIT_NICE)") != std::string::npos);
    // perf reads a file owned by another user only with -f.
    auto rep = run_command(perf + " report -f --stats -i " + out + " 2>&1");
    INFO(rep.output);
    CHECK(rep.status == 0);
    CHECK(rep.output.find("failed to process") == std::string::npos);
}

TEST_CASE("a --collector-nice below what the user may set is refused (exit 2) with what it needs", "[unattended]") {
    require_kernel();
    if (getuid() != 0) skip_test("needs root to switch to another user");
    Sysctl paranoid("kernel/perf_event_paranoid", "2");
    TempDir d("open", 0777);
    TempFile log("user-log");
    chmod(log.path.c_str(), 0666);
    Running r = spawn({"record", "--collector-nice", "-3", "-o", d.path + "/perf.data", "--", "true"}, log.path, become_nobody);
    const int rc = wait_exit(r);
    const std::string text = read_file(log.path);
    INFO(text);
    REQUIRE(rc != 126);
    CHECK(rc == 2);
    CHECK(text.find("--collector-nice -3: setpriority(-3): Permission denied (EACCES) (a negative nice needs root "
                    "or CAP_SYS_NICE, or RLIMIT_NICE)") != std::string::npos);
    struct stat st{};
    CHECK(stat((d.path + "/perf.data").c_str(), &st) != 0);  // nothing left behind
}

TEST_CASE("a closed stderr does not end a capture", "[unattended]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("stderr");
    // head exits after the first line; every later line ringcap writes meets a closed pipe.
    auto r = run_command("bash -c '" + kRingcap + " record -a -v -F 1000 --duration 0.5 -o " + f.path +
                         " 2>&1 | head -1 >/dev/null; exit ${PIPESTATUS[0]}'");
    CHECK(r.status == 0);
    const PerfStats stats = perf_report_stats(perf, f.path);
    CHECK(stats.ok());
    CHECK(stats.count("SAMPLE") > 0);
}

TEST_CASE("the recorded command's failure is the record's exit status, as perf record's", "[unattended]") {
    require_kernel();
    TempFile f("cmdstatus");
    struct Case {
        std::string args, message;
        int status;
    };
    for (const Case& c : {Case{"-F 1000 -- sh -c 'exit 3'", "the command exited with status 3", 3},
                          Case{"-a -F 1000 -- sh -c 'exit 3'", "the command exited with status 3", 3},
                          Case{"-F 1000 -- sh -c 'kill -9 $$'", "the command was killed by SIGKILL (status 137)", 137},
                          Case{"-F 1000 -- true", "the command exited with status 0", 0},
                          Case{"-a -F 1000 --duration 0.3 -- sleep 30", "was still running at the end and got SIGTERM",
                               0}}) {
        auto r = run_command(kRingcap + " record -o " + f.path + " " + c.args + " 2>&1");
        INFO(c.args << "\n" << r.output);
        CHECK(r.status == c.status);
        CHECK(r.output.find("ringcap: " + (c.message[0] == 'w' ? "the command " + c.message : c.message)) !=
              std::string::npos);
    }
}

TEST_CASE("every kernel loss counts: lost= equals perf's count, the tracking event's records included",
          "[unattended]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("lost"), log("lost-log");
    // Small rings, busy CPUs, processes starting all the time (side-band records), and the collector
    // stopped for a while: every ring fills.
    Running r = spawn({"record", "-a", "-F", "10000", "-m", "8", "-o", f.path, "--", "sh", "-c",
                       "busy() { i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done; }; busy & b=$!; "
                       "trap 'kill $b; exit 0' TERM; while :; do /bin/true; done"},
                      log.path);
    REQUIRE(eventually([&] { return header_data_size(f.path) > 0; }));
    const uint64_t start = header_data_size(f.path);
    REQUIRE(eventually([&] { return header_data_size(f.path) > start; }));
    kill(r.pid, SIGSTOP);
    timespec ts{1, 0};  // the hostile situation: a collector that does not run for a second
    nanosleep(&ts, nullptr);
    kill(r.pid, SIGCONT);
    kill(r.pid, SIGINT);
    CHECK(wait_exit(r) == 0);
    const std::string text = read_file(log.path);
    INFO(text);
    const PerfStats stats = perf_report_stats(perf, f.path);
    INFO(stats.output);
    REQUIRE(stats.ok());
    const long long lost = summary_value(text, "lost");
    CHECK(lost > 0);
    CHECK(lost == stats.events_sum("LOST_SAMPLES"));
    CHECK(text.find("ringcap: WARNING: the kernel dropped ") != std::string::npos);
}

TEST_CASE("throttling is counted per CPU and said, and equals perf's THROTTLE count", "[unattended]") {
    require_kernel();
    const std::string perf = require_perf();
    // Little CPU time for sampling: the kernel throttles at once (and may lower the maximum rate on
    // its own, which must not outlive the test either).
    Sysctl rate("kernel/perf_event_max_sample_rate", read_file("/proc/sys/kernel/perf_event_max_sample_rate"));
    Sysctl budget("kernel/perf_cpu_time_max_percent", "1");
    TempFile f("throttle");
    // Idle CPUs: a throttled event there waits for the next tick to restart, so it shows most.
    auto r = run_command(kRingcap + " record -a -F max --duration 1 -o " + f.path + " 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    const long long throttled = summary_value(r.output, "throttled");
    const PerfStats stats = perf_report_stats(perf, f.path);
    INFO(stats.output);
    if (throttled == 0 && stats.count("THROTTLE") == 0) skip_test("the kernel did not throttle here");
    CHECK(throttled == stats.count("THROTTLE"));
    CHECK(r.output.find("ringcap: WARNING: the kernel throttled sampling") != std::string::npos);
}

TEST_CASE("without -F, a kernel.perf_event_max_sample_rate below 4000 lowers the default, as in perf",
          "[unattended]") {
    require_kernel();
    Sysctl rate("kernel/perf_event_max_sample_rate", "1000");
    TempFile f("maxrate");
    auto r = run_command(kRingcap + " record -a --duration 0.3 -o " + f.path + " 2>&1");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("kernel.perf_event_max_sample_rate=1000 is below the default -F 4000: sampling at 1000 Hz") !=
          std::string::npos);
    auto given = run_command(kRingcap + " record -a -F 4000 --duration 0.3 -o " + f.path + " 2>&1");
    CHECK(given.status == 2);
    CHECK(given.output.find("sysctl -w kernel.perf_event_max_sample_rate=4000") != std::string::npos);
}

TEST_CASE("the output's filesystem can be unmounted as soon as ringcap exits", "[unattended]") {
    require_kernel();
    for (const std::string backend : {"uring", "epoll"}) {
        INFO(backend);
        SmallFs fs("64m");
        for (int i = 0; i < 3; ++i) {
            auto r = run_command(kRingcap + " record -a -F 1000 --backend " + backend + " --duration 0.2 -o " +
                                 fs.dir + "/perf.data 2>&1");
            INFO(r.output);
            REQUIRE(r.status == 0);
            // No delay: ringcap released everything on the filesystem before it exited.
            CHECK(umount2(fs.dir.c_str(), 0) == 0);
            REQUIRE(mount("ringcap-test", fs.dir.c_str(), "tmpfs", 0, "size=64m") == 0);
        }
    }
}

namespace {

// Takes a CPU offline for as long as it lives (root); back online at the end whatever happens.
struct CpuOffline {
    std::string path;
    explicit CpuOffline(int cpu) : path("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/online") {}
    bool set(bool online) {
        std::ofstream out(path);
        out << (online ? "1" : "0");
        out.flush();
        return bool(out);
    }
    ~CpuOffline() { set(true); }
};

}  // namespace

TEST_CASE("a CPU that goes offline and comes back during -a is recorded again, and the summary says so",
          "[unattended]") {
    require_kernel();
    const std::string perf = require_perf();
    const std::vector<int> cpus = ringcap::online_cpus();
    if (cpus.size() < 2 || ::access(("/sys/devices/system/cpu/cpu" + std::to_string(cpus.back()) + "/online").c_str(),
                                    W_OK) != 0)
        skip_test("no CPU can be taken offline here (needs root and a second CPU with hotplug)");
    const int cpu = cpus.back();
    CpuOffline hotplug(cpu);
    TempFile f("hotplug"), log("hotplug-log");
    std::vector<std::string> args{"record", "-a", "-F", "1000", "-o", f.path};
    args.insert(args.end(), kBusy.begin(), kBusy.end());
    Running r = spawn(args, log.path);
    REQUIRE(eventually([&] { return header_data_size(f.path) > 0; }));
    const std::string cpu_s = "cpu " + std::to_string(cpu);
    REQUIRE(hotplug.set(false));
    REQUIRE(eventually([&] { return read_file(log.path).find(cpu_s + " went offline") != std::string::npos; }));
    REQUIRE(hotplug.set(true));
    REQUIRE(eventually([&] {
        return read_file(log.path).find(cpu_s + " is back online: its events are open again") != std::string::npos;
    }));
    // Work on that CPU now: its new events must see it.
    auto pinned = run_command("taskset -c " + std::to_string(cpu) +
                              " sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done' 2>&1");
    REQUIRE(pinned.status == 0);
    kill(r.pid, SIGINT);
    REQUIRE(wait_exit(r) == 0);
    const std::string text = read_file(log.path);
    INFO(text);
    CHECK(text.find("offline 1x, reopened 1x") != std::string::npos);
    CHECK(text.find("ringcap: " + cpu_s + " went offline 1 time(s) during the record; its events were opened again") !=
          std::string::npos);

    std::string err;
    auto file = ringcap::read_perf_data(f.path, &err);
    REQUIRE(file);
    CHECK(file->counts.unknown_ids == 0);
    // The sampling event has one id per CPU, and one more for the events opened again: it sampled.
    const auto& ids = file->attrs.at(0).ids;
    REQUIRE(ids.size() == cpus.size() + 1);
    CHECK(file->counts.samples_per_id[ids.back()] > 0);
    const PerfStats stats = perf_report_stats(perf, f.path);
    INFO(stats.output);
    CHECK(stats.ok());
    CHECK(stats.count("SAMPLE") == summary_value(text, "samples"));
}
