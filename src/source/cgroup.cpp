#include "ringcap/cgroup.hpp"

#include <cerrno>
#include <fcntl.h>
#include <fstream>
#include <linux/magic.h>
#include <sstream>
#include <sys/vfs.h>
#include <vector>

namespace ringcap {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        auto octal = [&](size_t j) { return s[j] >= '0' && s[j] <= '7'; };
        if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
            out += char((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        } else {
            out += s[i];
        }
    }
    return out;
}

bool has_option(const std::string& options, const std::string& name) {
    std::istringstream in(options);
    for (std::string o; std::getline(in, o, ',');)
        if (o == name) return true;
    return false;
}

}  // namespace

std::string perf_cgroup_mount(const std::string& mountinfo) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    std::string v1, v2;
    std::istringstream lines(mountinfo);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream in(line);
        std::vector<std::string> f;
        for (std::string w; in >> w;) f.push_back(w);
        size_t sep = 6;
        while (sep < f.size() && f[sep] != "-") ++sep;
        if (f.size() < 5 || sep + 1 >= f.size()) continue;
        const std::string& type = f[sep + 1];
        const std::string super = sep + 3 < f.size() ? f[sep + 3] : "";
        if (type == "cgroup" && v1.empty() && has_option(super, "perf_event")) v1 = unescape(f[4]);
        if (type == "cgroup2" && v2.empty()) v2 = unescape(f[4]);
    }
    return v1.empty() ? v2 : v1;
}

std::string cgroup_path(const std::string& mount, const std::string& name) {
    const std::string root = mount == "/" ? "" : mount;
    if (name == root || name.rfind(root + "/", 0) == 0) return name;
    size_t skip = name.find_first_not_of('/');
    return root + "/" + (skip == std::string::npos ? std::string() : name.substr(skip));
}

Cgroup open_cgroup(const std::string& name) {
    std::ifstream in("/proc/self/mountinfo");
    std::stringstream text;
    text << in.rdbuf();
    const std::string mount = perf_cgroup_mount(text.str());
    if (mount.empty())
        throw Error("-G " + name + ": no cgroup v2 filesystem is mounted (/proc/self/mountinfo lists no cgroup2 mount, "
                    "nor a cgroup v1 hierarchy with the perf_event controller): mount one, e.g. "
                    "mount -t cgroup2 none /sys/fs/cgroup");
    Cgroup cg;
    cg.name = name;
    cg.path = cgroup_path(mount, name);
    const int fd = ::open(cg.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        const std::string what = "-G " + name + ": cannot open the cgroup directory " + cg.path + ": " + errno_text(err);
        if (err == ENOENT)
            throw Error(what + "; no such cgroup: NAME is relative to the cgroup mount " + mount +
                        " (as /proc/PID/cgroup shows it, e.g. -G /system.slice/cron.service), or an absolute path "
                        "under it");
        if (err == EACCES || err == EPERM)
            throw Error(what + "; run as root, or as a user who may read that directory");
        if (err == ENOTDIR) throw Error(what + "; a cgroup is a directory under " + mount);
        throw Error(what);
    }
    cg.fd.reset(fd);
    struct statfs fs{};
    if (::fstatfs(fd, &fs) != 0 || (fs.f_type != CGROUP2_SUPER_MAGIC && fs.f_type != CGROUP_SUPER_MAGIC))
        throw Error("-G " + name + ": " + cg.path + " is not a cgroup directory (it is outside the cgroup mount " +
                    mount + ")");
    return cg;
}

}  // namespace ringcap
