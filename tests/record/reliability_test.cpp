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
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ringcap/perf_data.hpp"
#include "tools.hpp"

namespace {

const std::string kRingcap = RINGCAP_BINARY;

// A ringcap child with stdout+stderr captured in a file; `prepare` runs in the child before exec.
struct Running {
    pid_t pid = -1;
    std::string log;
};

template <typename Prepare>
Running spawn(const std::vector<std::string>& args, const std::string& log, Prepare prepare) {
    Running r;
    r.log = log;
    r.pid = fork();
    REQUIRE(r.pid >= 0);
    if (r.pid == 0) {
        int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        prepare();
        std::vector<char*> argv;
        argv.push_back(const_cast<char*>(kRingcap.c_str()));
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        execv(kRingcap.c_str(), argv.data());
        _exit(127);
    }
    return r;
}
Running spawn(const std::vector<std::string>& args, const std::string& log) {
    return spawn(args, log, [] {});
}

int wait_exit(const Running& r) {
    int status = 0;
    REQUIRE(waitpid(r.pid, &status, 0) == r.pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The data size in the header on disk (0 if the file is not there or too short).
uint64_t header_data_size(const std::string& path) {
    ringcap::PerfFileHeader h{};
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = pread(fd, &h, sizeof h, 0);
    close(fd);
    return n == ssize_t(sizeof h) && std::memcmp(h.magic, "PERFILE2", 8) == 0 ? h.data.size : 0;
}

// Polls a condition (not a time): at most `tries` checks 10 ms apart.
template <typename Cond>
bool eventually(Cond cond, int tries = 3000) {
    for (int i = 0; i < tries; ++i) {
        if (cond()) return true;
        timespec ts{0, 10'000'000};
        nanosleep(&ts, nullptr);
    }
    return cond();
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
    // the header) only through the 0.5 s idle flush.
    Running r = spawn({"record", "-a", "-F", "200", "--duration", "60", "-o", f.path}, log.path);
    // Wait for the condition the guarantee is about: some data is durable and published.
    REQUIRE(eventually([&] { return header_data_size(f.path) > 0; }));
    kill(r.pid, SIGKILL);
    CHECK(wait_exit(r) == 128 + SIGKILL);
    const PerfStats stats = perf_report_stats(perf, f.path);
    CHECK(stats.ok());
    CHECK(stats.count("SAMPLE") > 0);
    auto script = run_command(perf + " script -i " + f.path + " 2>&1 >/dev/null");
    CHECK(script.output.empty());
}

TEST_CASE("a full disk stops the capture with a valid file and exit status 1", "[reliability]") {
    require_kernel();
    const std::string perf = require_perf();
    char dir[] = "/tmp/ringcap-full-XXXXXX";
    REQUIRE(mkdtemp(dir));
    if (mount("ringcap-test", dir, "tmpfs", 0, "size=384k") != 0) {
        rmdir(dir);
        skip_test(std::string("cannot mount a small tmpfs (needs root): ") + strerror(errno));
    }
    const std::string out = std::string(dir) + "/perf.data";
    TempFile log("full-log");
    // A modest rate: the 2 Hz flush sends a few small batches before the disk is full.
    Running r = spawn({"record", "-a", "-F", "4000", "--duration", "60", "-o", out}, log.path);
    const int rc = wait_exit(r);
    const std::string text = read_file(log.path);
    INFO(text);
    CHECK(rc == 1);
    CHECK(text.find("writing '" + out + "' failed") != std::string::npos);
    CHECK(text.find("No space left on device") != std::string::npos);
    std::smatch m;
    REQUIRE(std::regex_search(text, m, std::regex("kept ([0-9]+) bytes")));
    const long long kept = std::stoll(m[1]);
    CHECK(kept > 0);
    CHECK(header_data_size(out) == uint64_t(kept));
    const PerfStats stats = perf_report_stats(perf, out);
    CHECK(stats.ok());
    CHECK(stats.count("SAMPLE") > 0);
    umount2(dir, MNT_DETACH);
    rmdir(dir);
}

TEST_CASE("io_uring refused by seccomp: epoll fallback says why, --backend uring fails", "[reliability]") {
    require_kernel();
    const std::string perf = require_perf();
    // In the child: make io_uring_setup fail with EPERM, as a container's seccomp profile does.
    auto block_uring = [] {
        sock_filter filter[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        sock_fprog prog{sizeof filter / sizeof filter[0], filter};
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
    };
    TempFile f("seccomp"), log("seccomp-log");
    Running r = spawn({"record", "-a", "-F", "1000", "--duration", "0.5", "-o", f.path}, log.path, block_uring);
    CHECK(wait_exit(r) == 0);
    std::string text = read_file(log.path);
    INFO(text);
    CHECK(text.find("io_uring unavailable, using epoll: io_uring_setup failed: Operation not permitted") !=
          std::string::npos);
    CHECK(perf_report_stats(perf, f.path).count("SAMPLE") == summary_value(text, "samples"));

    Running r2 = spawn({"record", "-a", "--backend", "uring", "--duration", "0.5", "-o", f.path + ".u"}, log.path,
                       block_uring);
    CHECK(wait_exit(r2) == 2);
    text = read_file(log.path);
    CHECK(text.find("io_uring_setup failed") != std::string::npos);
    struct stat st{};
    CHECK(stat((f.path + ".u").c_str(), &st) != 0);
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
        CHECK(stat((f.path + ".ringcap-tmp").c_str(), &st) != 0);
    }
}
