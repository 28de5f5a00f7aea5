// Unattended-use guarantees: clean stops on signals, a readable file after SIGKILL, a valid file and
// exit status 1 on a full disk, the epoll fallback when io_uring is refused, shrinking rings under a
// locked-memory limit, and one-line refusals (exit 2, no file) for bad command lines.
#include <catch2/catch.hpp>

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <regex>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "record/spawn.hpp"
#include "testkit/perf_data_reader.hpp"
#include "tools.hpp"

using namespace ringcap_test;

namespace {

// Starts a record and SIGKILLs it once samples are durable and published: the file appears with the
// records of what already runs (its header says so), then the header's data size grows to name
// samples. (Growth alone is not enough: with -z a round marker's block holds no sample.)
void kill_once_data_is_published(const std::vector<std::string>& args, const std::string& file,
                                 const std::string& log) {
    Running r = spawn(args, log);
    REQUIRE(eventually([&] { return header_data_size(file) > 0; }));
    uint64_t seen = 0;
    REQUIRE(eventually([&] {
        const uint64_t size = header_data_size(file);
        if (size == seen) return false;  // read the file again only when its header changed
        seen = size;
        std::string err;
        const auto f = ringcap::read_perf_data(file, &err);
        return f && f->counts.samples > 0;
    }));
    kill(r.pid, SIGKILL);
    CHECK(wait_exit(r) == 128 + SIGKILL);
}

// Which of a record's files at `path` are still locked: the file, its .old, its starting markers.
std::vector<std::string> held_locks(const std::string& path) {
    const size_t slash = path.rfind('/');
    const std::string dir = path.substr(0, slash), name = path.substr(slash + 1);
    std::vector<std::string> names = {name, name + ".old"};
    for (const auto& e : dir_entries(dir))
        if (e.rfind("." + name + ".ringcap-starting-", 0) == 0) names.push_back(e);
    std::vector<std::string> held;
    for (const auto& n : names) {
        const int fd = open((dir + "/" + n).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) held.push_back(n);
        close(fd);
    }
    return held;
}

}  // namespace

TEST_CASE("SIGINT, SIGTERM and SIGHUP end a record cleanly, a second SIGINT does no harm", "[reliability]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("signal"), log("signal-log");
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
        INFO("signal " << sigabbrev_np(sig));
        std::remove(f.path.c_str());  // the readiness check below must see this run's file
        Running r = spawn({"record", "-a", "-F", "2000", "-o", f.path}, log.path);
        // The header is written after the stop signals are routed to the loop: from then on a
        // signal means "stop cleanly".
        REQUIRE(eventually([&] { return header_data_size(f.path) > 0; }));
        kill(r.pid, sig);
        if (sig == SIGINT) kill(r.pid, SIGINT);  // the impatient second Ctrl-C
        const int rc = wait_exit(r);
        const std::string out = read_file(log.path);
        INFO(out);
        CHECK(rc == 0);
        CHECK(out.find(std::string("stopped (SIG") + sigabbrev_np(sig) + ")") != std::string::npos);
        const PerfStats stats = perf_report_stats(perf, f.path);
        CHECK(stats.ok());
        CHECK(stats.count("SAMPLE") == summary_value(out, "samples"));
    }
}

TEST_CASE("after SIGKILL perf still reads the file up to the last refreshed header", "[reliability]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("kill9"), log("kill9-log");
    // A low rate: a 1 MiB staging buffer would take minutes to fill, so data reaches the disk (and
    // the header) only through the 1 s idle flush.
    kill_once_data_is_published({"record", "-a", "-F", "200", "--duration", "60", "-o", f.path}, f.path, log.path);
    const PerfStats stats = perf_report_stats(perf, f.path);
    CHECK(stats.ok());
    CHECK(stats.count("SAMPLE") > 0);
    CHECK(perf_script_complaints(perf, f.path).empty());
}

TEST_CASE("a full disk keeps what fit (at least 95 % of the free space) in a file perf reads, exit status 1",
          "[reliability]") {
    require_kernel();
    const std::string perf = require_perf();
    // One collector keeps all that fit. With several, the file ends where the first write failed:
    // what the others wrote beyond it (their writes in flight then) is given up, but the file is
    // still valid and perf reads what it kept.
    for (const std::string size : {"1m", "3m", "16m"}) {
        for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
                 {"--call-graph", "dwarf", "--threads", "1"}, {"-g", "--threads", "1"},
                 {"--call-graph", "dwarf", "--no-direct", "--threads", "1"},
                 {"--call-graph", "dwarf", "--backend", "epoll", "--threads", "1"}, {"--call-graph", "dwarf"}}) {
            std::string flags;
            for (const auto& v : variant) flags += v + " ";
            if (size == "16m" && variant[0] == "-g") continue;  // -g samples are small: 16 MiB take longer than the load
            const bool one = variant.back() == "1";
            if (!one && size != "16m") continue;
            INFO("tmpfs " << size << ", " << flags);
            SmallFs fs(size);
            const uint64_t free_at_start = fs.free_bytes();
            const std::string out = fs.dir + "/perf.data";
            TempFile log("full-log");
            std::vector<std::string> args{"record", "-a", "-F", "10000", "-o", out};
            args.insert(args.end(), variant.begin(), variant.end());
            args.insert(args.end(), kBusy.begin(), kBusy.end());
            const int rc = wait_exit(spawn(args, log.path));
            const std::string text = read_file(log.path);
            INFO(text);
            CHECK(rc == 1);
            CHECK(text.find("writing '" + out + "' failed: No space left on device (ENOSPC) (the filesystem is full)") !=
                  std::string::npos);
            std::smatch m;
            REQUIRE(std::regex_search(text, m, std::regex("kept ([0-9]+) bytes of data")));
            const uint64_t kept = std::stoull(m[1]);
            INFO("kept " << kept << " of " << free_at_start << " bytes free");
            if (one) CHECK(kept >= free_at_start * 95 / 100);
            else CHECK(kept > 0);
            CHECK(header_data_size(out) == kept);
            const PerfStats stats = perf_report_stats(perf, out);
            INFO(stats.output);
            CHECK(stats.ok());
            CHECK(stats.count("SAMPLE") > 0);
            CHECK(perf_script_complaints(perf, out).empty());
        }
    }
}

TEST_CASE("io_uring refused by seccomp (setup, or only enter): epoll fallback says why, --backend uring fails",
          "[reliability]") {
    require_kernel();
    const std::string perf = require_perf();
    for (const auto& [nr, what] : {std::pair{__NR_io_uring_setup, "io_uring_setup failed: Operation not permitted"},
                                   std::pair{__NR_io_uring_enter, "io_uring_enter failed: Operation not permitted"}}) {
        INFO("seccomp refuses syscall " << nr);
        // In the child: make that syscall fail with EPERM, as a container's seccomp profile does.
        auto block = [nr = nr] {
            sock_filter filter[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, unsigned(nr), 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
            };
            sock_fprog prog{sizeof filter / sizeof filter[0], filter};
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
        };
        TempFile f("seccomp"), log("seccomp-log");
        Running r = spawn({"record", "-a", "-F", "1000", "--duration", "0.5", "-o", f.path}, log.path, block);
        CHECK(wait_exit(r) == 0);
        std::string text = read_file(log.path);
        INFO(text);
        CHECK(text.find(std::string("io_uring unavailable, using epoll: ") + what) != std::string::npos);
        CHECK(perf_report_stats(perf, f.path).count("SAMPLE") == summary_value(text, "samples"));

        // Asked for io_uring explicitly: refused at setup, exit 2, no file touched.
        std::remove((f.path + ".old").c_str());
        {
            std::ofstream keep(f.path);
            keep << "precious";
        }
        Running r2 = spawn({"record", "-a", "--backend", "uring", "--duration", "0.5", "-o", f.path}, log.path, block);
        CHECK(wait_exit(r2) == 2);
        text = read_file(log.path);
        CHECK(text.find(what) != std::string::npos);
        CHECK(read_file(f.path) == "precious");
        struct stat st{};
        CHECK(stat((f.path + ".old").c_str(), &st) != 0);
    }
}

TEST_CASE("rings above the locked-memory limit are halved instead of failing", "[reliability]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("mlock"), log("mlock-log");
    // Without CAP_IPC_LOCK, ring memory beyond kernel.perf_event_mlock_kb is charged to
    // RLIMIT_MEMLOCK; with a 64 KiB limit a 4 MiB ring per CPU cannot be mapped (perf fails here).
    auto no_ipc_lock = [] {
        prctl(PR_CAPBSET_DROP, 14 /* CAP_IPC_LOCK */, 0, 0, 0);  // gone after exec, even for root
        rlimit rl{64 * 1024, 64 * 1024};
        setrlimit(RLIMIT_MEMLOCK, &rl);
    };
    Running r = spawn({"record", "-a", "-m", "1024", "-F", "1000", "--duration", "0.5", "-o", f.path}, log.path,
                      no_ipc_lock);
    const int rc = wait_exit(r);
    const std::string text = read_file(log.path);
    INFO(text);
    if (rc == 2 && text.find("perf_event_mlock_kb") != std::string::npos)
        skip_test("even the smallest ring is above this machine's locked-memory limit");
    REQUIRE(rc == 0);
    CHECK(text.find("ring memory for -m 1024 was refused (above the locked-memory limit") != std::string::npos);
    CHECK(perf_report_stats(perf, f.path).count("SAMPLE") == summary_value(text, "samples"));
}

TEST_CASE("bad command lines: one-line error, exit 2, no file, an existing perf.data untouched", "[reliability][cli]") {
    TempFile f("bad"), log("bad-log");
    {
        std::ofstream keep(f.path);
        keep << "precious";
    }
    const std::string o = " -o " + f.path;
    const std::vector<std::string> lines = {
        "record -a -e no-such-event" + o,
        "record -a -e cpu-clock,,task-clock" + o,
        "record -C 1-0" + o,
        "record -C abc" + o,
        "record -C 4095" + o,
        "record -a -F 0" + o,
        "record -a -F -100" + o,
        "record -a -F 99999999" + o,
        "record -a -c 0" + o,
        "record -a -m 3" + o,
        "record -a -m -8" + o,
        "record -a -m 0" + o,
        "record -a -m 99999999999999" + o,
        "record -a --duration -1" + o,
        "record -a --duration soon" + o,
        "record -a -o /nonexistent-dir/perf.data",
        "record -a -o /proc/ringcap-cannot-write-here.data",
        "record -a --no-such-flag" + o,
        "record" + o,
        "record -a -C 0" + o,
        "record -p 0" + o,
        "record -p 1073741823" + o,
        "record -a --backend kqueue" + o,
        "record -a -F 100 -c 100" + o,
        "record -a --" + o,
        "frobnicate",
    };
    for (const auto& line : lines) {
        INFO(line);
        auto r = run_command(kRingcap + " " + line + " 2>&1");
        CHECK(r.status == 2);
        // One line, starting with our name, saying what is wrong.
        CHECK(r.output.rfind("ringcap: ", 0) == 0);
        CHECK(std::count(r.output.begin(), r.output.end(), '\n') <= (line == "frobnicate" ? 5 : 1));
        CHECK(read_file(f.path) == "precious");
        struct stat st{};
        CHECK(stat((f.path + ".old").c_str(), &st) != 0);
        CHECK(leftover_temporaries(f.path) == 0);
    }
}

TEST_CASE("kill -9 at any moment: the old file is intact, or the new one reads from its first byte", "[reliability]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("earlykill"), log("earlykill-log");
    // The kill points are the hostile situation itself, not synchronisation: from before the events
    // are open to well into the capture.
    for (int delay_us : {0, 2000, 10000, 30000, 60000, 100000, 300000, -30000, -100000, -300000}) {
        // Negative: the same with -z (compressed records, whose header names compression anchors).
        const bool z = delay_us < 0;
        delay_us = std::abs(delay_us);
        INFO("kill -9 after " << delay_us << " us" << (z ? " with -z" : ""));
        std::remove((f.path + ".old").c_str());
        {
            std::ofstream old(f.path);
            old << "previous capture";
        }
        std::vector<std::string> args = {"record", "-a", "-F", "1000", "--call-graph", "dwarf", "-o", f.path};
        if (z) args.push_back("-z");
        Running r = spawn(args, log.path);
        timespec ts{0, long(delay_us) * 1000};
        nanosleep(&ts, nullptr);
        kill(r.pid, SIGKILL);
        // Killed, not ended on its own (a start refused because the file is locked exits 2)...
        REQUIRE(wait_exit(r) == 128 + SIGKILL);
        const std::string text = read_file(log.path);
        INFO(text);
        CHECK(text.find("is still locked after") == std::string::npos);
        CHECK(text.find("another ringcap") == std::string::npos);
        // ...and, once reaped, it holds no lock the next start would wait for (its io_uring, which
        // the kernel tears down later, must not keep one).
        REQUIRE(held_locks(f.path).empty());
        if (read_file(f.path) == "previous capture") {
            struct stat st{};
            CHECK(stat((f.path + ".old").c_str(), &st) != 0);  // not moved away for nothing
            continue;
        }
        CHECK(read_file(f.path + ".old") == "previous capture");
        const PerfStats stats = perf_report_stats(perf, f.path);
        INFO(stats.output);
        CHECK(stats.ok());
        CHECK(header_data_size(f.path) > 0);
        CHECK(perf_script_complaints(perf, f.path).empty());
    }
    // A temporary file left by a kill is not in the next record's way.
    auto r = run_command(kRingcap + " record -a -F 1000 --duration 0.2 -o " + f.path + " 2>&1");
    INFO(r.output);
    CHECK(r.status == 0);
}

TEST_CASE("compressed (-z): after SIGKILL perf reads the compressed file up to the last anchor", "[reliability][compress]") {
    require_kernel();
    const std::string perf = require_perf();
    TempFile f("kill9z"), log("kill9z-log");
    // Compressed data reaches the header with the idle flush and the round marker (anchor) after it.
    kill_once_data_is_published(
        {"record", "-z", "-a", "-F", "4000", "--call-graph", "dwarf", "--duration", "60", "-o", f.path}, f.path,
        log.path);
    const PerfStats stats = perf_report_stats(perf, f.path);
    INFO(stats.output);
    CHECK(stats.ok());
    CHECK(stats.count("SAMPLE") > 0);
    CHECK(stats.count("COMPRESSED") > 0);
    CHECK(perf_script_complaints(perf, f.path).empty());
    auto hdr = run_command(perf + " report -i " + f.path + " --header-only 2>&1");
    CHECK(hdr.output.find("compressed : Zstd") != std::string::npos);
    std::string err;
    auto file = ringcap::read_perf_data(f.path, &err);
    REQUIRE(file);
    CHECK(file->counts.decompress_errors == 0);
    CHECK(file->counts.compressed_leftover == 0);
    CHECK(file->counts.samples == uint64_t(stats.count("SAMPLE")));
}

TEST_CASE("a full ext4 disk, where the output is preallocated: what fit is kept, perf reads it", "[reliability]") {
    require_kernel();
    const std::string perf = require_perf();
    SmallExt4 fs(32);
    const uint64_t free_at_start = fs.free_bytes();
    const std::string out = fs.dir + "/perf.data";
    TempFile log("ext4-full-log");
    std::vector<std::string> args{"record", "-a", "-F", "10000", "--call-graph", "dwarf", "-o", out};
    args.insert(args.end(), kBusy.begin(), kBusy.end());
    const int rc = wait_exit(spawn(args, log.path));
    const std::string text = read_file(log.path);
    INFO(text);
    CHECK(rc == 1);
    CHECK(text.find("No space left on device (ENOSPC) (the filesystem is full)") != std::string::npos);
    std::smatch m;
    REQUIRE(std::regex_search(text, m, std::regex("kept ([0-9]+) bytes of data")));
    const uint64_t kept = std::stoull(m[1]);
    INFO("kept " << kept << " of " << free_at_start << " bytes free");
    CHECK(kept >= free_at_start * 90 / 100);  // ext4 spends some of it on extents and the journal
    CHECK(header_data_size(out) == kept);
    const PerfStats stats = perf_report_stats(perf, out);
    INFO(stats.output);
    CHECK(stats.ok());
    CHECK(stats.count("SAMPLE") > 0);
}
