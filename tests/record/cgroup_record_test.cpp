// -G: a job-scoped capture. Of two busy loops, only the one in the cgroup is sampled.
#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/stat.h>

#include "record/spawn.hpp"
#include "ringcap/cgroup.hpp"
#include "tools.hpp"

using namespace ringcap_test;

namespace {

// A fresh cgroup under the perf cgroup mount, removed at the end; skips when none can be made.
struct TestCgroup {
    std::string name, path;
    TestCgroup() {
        std::ifstream in("/proc/self/mountinfo");
        std::stringstream text;
        text << in.rdbuf();
        const std::string mount = ringcap::perf_cgroup_mount(text.str());
        if (mount.empty()) skip_test("no cgroup v2 mount (nor a v1 perf_event hierarchy) in /proc/self/mountinfo");
        name = "ringcap-test-" + std::to_string(getpid());
        path = mount + "/" + name;
        if (mkdir(path.c_str(), 0755) != 0) skip_test("cannot create cgroup " + path + ": " + std::strerror(errno));
    }
    ~TestCgroup() {
        // Its processes are gone by now (Loop's destructor); the kernel may take a moment to see it empty.
        eventually([&] { return rmdir(path.c_str()) == 0 || errno == ENOENT; }, 300);
    }
    bool add(pid_t pid) const {
        std::ofstream procs(path + "/cgroup.procs");
        procs << pid << std::flush;
        return bool(procs);
    }
};

// A shell busy loop, killed and reaped when it goes out of scope.
struct Loop {
    pid_t pid = fork();
    Loop() {
        REQUIRE(pid >= 0);
        if (pid == 0) {
            execl("/bin/sh", "sh", "-c", "while :; do :; done", static_cast<char*>(nullptr));
            _exit(127);
        }
    }
    ~Loop() {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }
};

// perf script's samples of a file, counted by "pid event".
std::map<std::string, long> samples_by(const std::string& perf, const std::string& file, const std::string& fields) {
    auto r = run_command(perf + " script -i " + file + " -F " + fields + " 2>/dev/null");
    std::map<std::string, long> n;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);) {
        std::istringstream words(line);
        std::string key;
        for (std::string w; words >> w;) key += (key.empty() ? "" : " ") + w;
        if (!key.empty()) ++n[key];
    }
    return n;
}

int record(const std::vector<std::string>& args, const std::string& log) {
    return wait_exit(spawn(args, log));
}

}  // namespace

TEST_CASE("record -a -G samples only the tasks of the cgroup", "[record][cgroup]") {
    const std::string perf = require_kernel_and_perf();
    TestCgroup group;
    Loop inside, outside;
    if (!group.add(inside.pid)) skip_test("cannot move a process into " + group.path + "/cgroup.procs");
    const std::string in_pid = std::to_string(inside.pid), out_pid = std::to_string(outside.pid);
    TempFile data("cgroup"), log("cgroup-log");

    // One name: every event (the default cpu-clock) follows the group.
    REQUIRE(record({"record", "-a", "-G", group.name, "--duration", "1", "-o", data.path, "-v"}, log.path) == 0);
    const std::string out = read_file(log.path);
    INFO(out);
    CHECK_THAT(out, Catch::Matchers::Contains("system-wide, cgroup " + group.name));
    CHECK(perf_script_complaints(perf, data.path).empty());
    const auto by_pid = samples_by(perf, data.path, "pid");
    long inside_n = 0, other_n = 0;
    for (const auto& [pid, n] : by_pid) (pid == in_pid ? inside_n : other_n) += n;
    INFO("inside " << inside_n << ", other " << other_n << " (loop outside: pid " << out_pid << ")");
    CHECK(inside_n > 100);  // a second of a busy CPU at 4000 Hz, shared with the other loop
    CHECK(other_n == 0);
    CHECK(summary_value(out, "samples") == inside_n);

    // A list by event, with the group's absolute path: cpu-clock follows the group, task-clock (the
    // empty entry) every task, the loop outside included.
    REQUIRE(record({"record", "-a", "-e", "cpu-clock,task-clock", "-G", group.path + ",", "--duration", "1", "-o",
                    data.path},
                   log.path) == 0);
    long cpu_in = 0, cpu_other = 0, task_out = 0;
    for (const auto& [key, n] : samples_by(perf, data.path, "pid,event")) {
        const std::string pid = key.substr(0, key.find(' '));
        if (key.find("cpu-clock") != std::string::npos) (pid == in_pid ? cpu_in : cpu_other) += n;
        else if (key.find("task-clock") != std::string::npos && pid == out_pid) task_out += n;
    }
    INFO("cpu-clock inside " << cpu_in << ", other " << cpu_other << "; task-clock of the loop outside " << task_out);
    CHECK(cpu_in > 100);
    CHECK(cpu_other == 0);
    CHECK(task_out > 100);
}

TEST_CASE("record -G of a missing cgroup is refused before recording, naming the path", "[record][cgroup]") {
    TempFile data("cgroup-missing"), log("cgroup-missing-log");
    std::remove(data.path.c_str());
    CHECK(record({"record", "-a", "-G", "ringcap-no-such-group", "--duration", "1", "-o", data.path}, log.path) == 2);
    const std::string out = read_file(log.path);
    INFO(out);
    CHECK((out.find("/ringcap-no-such-group") != std::string::npos || out.find("mount -t cgroup2") != std::string::npos));
    struct stat st{};
    CHECK(stat(data.path.c_str(), &st) != 0);  // nothing written
}
