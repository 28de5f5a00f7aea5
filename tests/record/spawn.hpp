// Running the ringcap binary the way a batch job does, in hostile situations: in a child with its
// output in a file, something done to the child before exec, small filesystems, busy CPUs.
#pragma once

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <string>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "ringcap/perf_data.hpp"
#include "support.hpp"

namespace ringcap_test {

inline const std::string kRingcap = RINGCAP_BINARY;

// A ringcap child with stdout+stderr captured in a file.
struct Running {
    pid_t pid = -1;
    std::string log;
};

// `prepare` runs in the child before exec (limits, seccomp, cgroup, user).
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
inline Running spawn(const std::vector<std::string>& args, const std::string& log) {
    return spawn(args, log, [] {});
}

// The exit status as a shell reports it (128 + signal when killed).
inline int wait_exit(const Running& r) {
    int status = 0;
    REQUIRE(waitpid(r.pid, &status, 0) == r.pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The data size in the header on disk (0 if the file is not there or too short).
inline uint64_t header_data_size(const std::string& path) {
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

// A tmpfs of `size` mounted on a fresh directory for the test's lifetime; skips loudly without root.
struct SmallFs {
    std::string dir;
    explicit SmallFs(const std::string& size) {
        char tmpl[] = "/tmp/ringcap-fs-XXXXXX";
        REQUIRE(mkdtemp(tmpl));
        dir = tmpl;
        if (mount("ringcap-test", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
            const int err = errno;
            rmdir(dir.c_str());
            skip_test("cannot mount a small tmpfs (needs root): " + std::string(strerror(err)));
        }
    }
    ~SmallFs() {
        umount2(dir.c_str(), MNT_DETACH);
        rmdir(dir.c_str());
    }
    uint64_t free_bytes() const {
        struct statvfs v{};
        REQUIRE(statvfs(dir.c_str(), &v) == 0);
        return uint64_t(v.f_bavail) * v.f_frsize;
    }
};

// An ext4 filesystem of `mib` MiB in an image file, loop-mounted for the test's lifetime (where
// ringcap preallocates its output); skips loudly without root or mkfs.ext4.
struct SmallExt4 {
    std::string image, dir;
    explicit SmallExt4(int mib) {
        char tmpl[] = "/tmp/ringcap-ext4-XXXXXX";
        REQUIRE(mkdtemp(tmpl));
        dir = tmpl;
        image = dir + ".img";
        const std::string cmd = "truncate -s " + std::to_string(mib) + "M " + image + " && mkfs.ext4 -q -F " + image +
                                " >/dev/null 2>&1 && mount -o loop " + image + " " + dir + " 2>/dev/null";
        if (std::system(cmd.c_str()) != 0) {
            rmdir(dir.c_str());
            std::remove(image.c_str());
            skip_test("cannot make and loop-mount an ext4 image (needs root, mkfs.ext4 and loop devices)");
        }
    }
    ~SmallExt4() {
        umount2(dir.c_str(), MNT_DETACH);
        rmdir(dir.c_str());
        std::remove(image.c_str());
    }
    uint64_t free_bytes() const {  // what root may use, reserved blocks included
        struct statvfs v{};
        REQUIRE(statvfs(dir.c_str(), &v) == 0);
        return uint64_t(v.f_bfree) * v.f_frsize;
    }
};

// Both CPUs busy for several seconds, as arguments after ringcap's own: `-- sh -c ...`. SIGTERM
// (when the record ends first) stops both loops.
inline const std::vector<std::string> kBusy = {
    "--", "sh", "-c",
    "busy() { i=0; while [ $i -lt 2000000 ]; do i=$((i+1)); done; }; busy & b=$!; trap 'kill $b; exit 143' TERM; "
    "busy; wait"};

}  // namespace ringcap_test
