// -G's cgroup lookup: the mount from mountinfo, NAME to a directory, and errors that name the path.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "ringcap/cgroup.hpp"
#include "ringcap/perf_source.hpp"

using namespace ringcap;

namespace {
std::string own_mountinfo() {
    std::ifstream in("/proc/self/mountinfo");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}
}  // namespace

TEST_CASE("perf_cgroup_mount: a v1 hierarchy with perf_event first, else the cgroup2 mount", "[source][cgroup]") {
    // A hybrid systemd setup (this project's test machine): perf_event is not on a v1 hierarchy.
    const std::string hybrid =
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    CHECK(perf_cgroup_mount(hybrid) == "/sys/fs/cgroup/unified");
    // Debian 12: v2 only, with optional fields before the separator.
    CHECK(perf_cgroup_mount("30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n") ==
          "/sys/fs/cgroup");
    // perf_event bound to v1: its groups are the ones perf events can follow (as perf chooses).
    CHECK(perf_cgroup_mount(hybrid + "50 31 0:40 / /sys/fs/cgroup/perf_event rw - cgroup cgroup rw,perf_event\n") ==
          "/sys/fs/cgroup/perf_event");
    CHECK(perf_cgroup_mount("41 31 0:38 / /mnt/my\\040cg rw - cgroup2 none rw\n") == "/mnt/my cg");  // escaped space
    CHECK(perf_cgroup_mount("23 1 0:21 / /proc rw - proc proc rw\n").empty());
    CHECK(perf_cgroup_mount("").empty());
}

TEST_CASE("cgroup_path: NAME relative to the mount, /NAME as /proc/PID/cgroup writes it, or a path under it",
          "[source][cgroup]") {
    CHECK(cgroup_path("/sys/fs/cgroup", "system.slice/cron.service") == "/sys/fs/cgroup/system.slice/cron.service");
    CHECK(cgroup_path("/sys/fs/cgroup", "/slurm/job_7") == "/sys/fs/cgroup/slurm/job_7");
    CHECK(cgroup_path("/sys/fs/cgroup", "/sys/fs/cgroup/slurm/job_7") == "/sys/fs/cgroup/slurm/job_7");
    CHECK(cgroup_path("/sys/fs/cgroup", "/sys/fs/cgroupX/a") == "/sys/fs/cgroup/sys/fs/cgroupX/a");  // not under it
    CHECK(cgroup_path("/sys/fs/cgroup", "/") == "/sys/fs/cgroup/");                                 // the root group
    CHECK(cgroup_path("/", "a/b") == "/a/b");
}

TEST_CASE("open_cgroup: a missing group, or a directory outside cgroupfs, names the path tried", "[source][cgroup]") {
    const std::string mount = perf_cgroup_mount(own_mountinfo());
    try {
        open_cgroup("ringcap-no-such-group/x");
        FAIL("opened");
    } catch (const Error& e) {
        CHECK(e.exit_code() == 2);
        if (mount.empty()) {
            CHECK_THAT(e.what(), Catch::Matchers::Contains("mount -t cgroup2"));
        } else {
            CHECK_THAT(e.what(), Catch::Matchers::Contains(mount + "/ringcap-no-such-group/x"));
            CHECK_THAT(e.what(), Catch::Matchers::Contains("no such cgroup"));
        }
    }
    if (mount.empty()) return;
    // Out of the mount by '..': a directory, but not a cgroup.
    try {
        open_cgroup("../../../../../../../../../../../tmp");
        FAIL("opened");
    } catch (const Error& e) {
        CHECK(e.exit_code() == 2);
        CHECK_THAT(e.what(), Catch::Matchers::Contains("is not a cgroup directory"));
    }
    // The root group opens; PerfTarget opens each group once and keeps -G's order.
    const PerfTarget t = PerfTarget::from_options(parse_record_args({"-a", "-e", "cpu-clock,task-clock,faults", "-G", "/,,/"}));
    REQUIRE(t.cgroups.size() == 3);
    REQUIRE(t.cgroups[0]);
    CHECK(t.cgroups[0]->fd);
    CHECK(t.cgroups[1] == nullptr);
    CHECK(t.cgroups[2] == t.cgroups[0]);
    CHECK_THROWS_AS(PerfTarget::from_options(parse_record_args({"-a", "-G", "ringcap-no-such-group"})), Error);
}
