// Test tools: temp files, running commands, and perf as the independent reader of our files.
#pragma once

#include <algorithm>
#include <array>
#include <dirent.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "support.hpp"

struct TempFile {
    std::string path;
    explicit TempFile(const std::string& tag) {
        const char* dir = std::getenv("TMPDIR");
        std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/ringcap-" + tag + "-XXXXXX";
        int fd = mkstemp(tmpl.data());
        if (fd >= 0) ::close(fd);
        path = tmpl;
    }
    ~TempFile() {
        std::remove(path.c_str());
        std::remove((path + ".old").c_str());
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
};

struct CommandResult;
CommandResult run_command(const std::string& cmd);

// A fresh directory (mode `mode`: 0777 for a record run as another user), removed with what is in it.
struct TempDir {
    std::string path;
    explicit TempDir(const std::string& tag, mode_t mode = 0700) {
        const char* dir = std::getenv("TMPDIR");
        std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/ringcap-" + tag + "-XXXXXX";
        if (::mkdtemp(tmpl.data())) ::chmod(tmpl.c_str(), mode);
        path = tmpl;
    }
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

struct CommandResult {
    int status = -1;  // exit status, or -1 if it did not exit normally
    std::string output;
};

// Runs a shell command, capturing stdout.
inline CommandResult run_command(const std::string& cmd) {
    CommandResult r;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 65536> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

inline TempDir::~TempDir() { run_command("rm -rf '" + path + "'"); }

// The names in directory `dir` (not . and ..), sorted.
inline std::vector<std::string> dir_entries(const std::string& dir) {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(dir.c_str())) {
        while (dirent* e = ::readdir(d))
            if (std::string n = e->d_name; n != "." && n != "..") out.push_back(n);
        ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A write-bandwidth limit on the disk that holds a directory, for the processes moved into it: a
// cgroup with cgroup v2's io.max, or v1's blkio.throttle.write_bps_device (machines of this kind
// have either; the layout is read from /proc/self/mountinfo). O_DIRECT writes are throttled at once.
// The constructor skips the test with the reason when it cannot be made here.
struct WriteThrottle {
    std::string cgroup, procs_back;
    WriteThrottle(const std::string& dir, uint64_t bytes_per_s) {
        if (::geteuid() != 0) skip_test("a write throttle (cgroup io.max / blkio) needs root");
        struct stat st{};
        if (::stat(dir.c_str(), &st) != 0) skip_test("no " + dir);
        std::string dev = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
        // A partition's bios are throttled on its disk.
        if (::access(("/sys/dev/block/" + dev + "/partition").c_str(), F_OK) == 0) {
            std::string parent = read_file("/sys/dev/block/" + dev + "/../dev");
            while (!parent.empty() && parent.back() == '\n') parent.pop_back();
            dev = parent;
        }
        if (::access(("/sys/dev/block/" + dev).c_str(), F_OK) != 0)
            skip_test(dir + " is not on a block device (" + dev + "): nothing to throttle");
        std::string v1, v2;
        std::istringstream mi(read_file("/proc/self/mountinfo"));
        for (std::string line; std::getline(mi, line);) {
            std::istringstream f(line);
            std::vector<std::string> w;
            for (std::string x; f >> x;) w.push_back(x);
            const auto dash = std::find(w.begin(), w.end(), "-");
            if (dash == w.end() || dash + 1 == w.end() || w.size() < 5) continue;
            if (*(dash + 1) == "cgroup2") v2 = w[4];
            if (*(dash + 1) == "cgroup" && line.find("blkio") != std::string::npos) v1 = w[4];
        }
        const std::string name = "/ringcap-throttle-" + std::to_string(::getpid());
        if (!v2.empty() && read_file(v2 + "/cgroup.controllers").find("io") != std::string::npos) {
            std::ofstream(v2 + "/cgroup.subtree_control") << "+io";
            if (::mkdir((v2 + name).c_str(), 0755) == 0) {
                cgroup = v2 + name;
                std::ofstream(cgroup + "/io.max") << dev << " wbps=" << bytes_per_s;
                procs_back = v2 + "/cgroup.procs";
            }
        }
        if (cgroup.empty() && !v1.empty() && ::mkdir((v1 + name).c_str(), 0755) == 0) {
            cgroup = v1 + name;
            std::ofstream(cgroup + "/blkio.throttle.write_bps_device") << dev << " " << bytes_per_s;
            procs_back = v1 + "/cgroup.procs";
        }
        if (cgroup.empty()) skip_test("no cgroup io controller here (neither cgroup v2 io nor v1 blkio)");
    }
    // Moves this process (every thread) under the limit, or back.
    void enter() const { std::ofstream(cgroup + "/cgroup.procs") << ::getpid(); }
    void leave() const { std::ofstream(procs_back) << ::getpid(); }
    // The command line prefix that runs a shell command under the limit.
    std::string wrap(const std::string& cmd) const {
        return "sh -c 'echo $$ > " + cgroup + "/cgroup.procs && exec " + cmd + "'";
    }
    ~WriteThrottle() {
        leave();
        ::rmdir(cgroup.c_str());
    }
    WriteThrottle(const WriteThrottle&) = delete;
    WriteThrottle& operator=(const WriteThrottle&) = delete;
};

// Temporary files of ringcap's left next to `path` (a named temporary is PATH.ringcap-tmp-*).
inline size_t leftover_temporaries(const std::string& path) {
    const auto slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    const std::string prefix = path.substr(slash == std::string::npos ? 0 : slash + 1) + ".ringcap-tmp";
    size_t n = 0;
    for (const auto& e : dir_entries(dir)) n += e.rfind(prefix, 0) == 0;
    return n;
}

// Path of perf, or "" if it is not installed.
inline std::string find_perf() {
    auto r = run_command("command -v perf 2>/dev/null");
    std::string p = r.output;
    while (!p.empty() && (p.back() == '\n' || p.back() == ' ')) p.pop_back();
    if (p.empty()) return "";
    // Debian's /usr/bin/perf is a wrapper that needs the linux-perf-VERSION binary; check it runs.
    auto v = run_command(p + " version 2>/dev/null");
    return v.status == 0 ? p : "";
}

// perf, or a loud skip: a cross-check with perf never passes by not running.
inline std::string require_perf() {
    std::string perf = find_perf();
    if (perf.empty()) skip_test("perf (linux-perf) is not installed: cannot read the file back");
    return perf;
}

// The kernel's perf events and perf as the reader, or a loud skip.
inline std::string require_kernel_and_perf() {
    require_kernel();
    return require_perf();
}

// What `perf report --stats` says about a file: the "Aggregated stats:" block and one block per
// event ("<name> stats:"), each as record type -> count. perf leaves out types it did not see.
struct PerfStats {
    int status = -1;
    std::string output;
    std::map<std::string, long long> total;
    std::vector<std::string> event_names;
    std::vector<std::map<std::string, long long>> events;

    // perf read the whole file without complaint.
    bool ok() const {
        return status == 0 && output.find("failed to process") == std::string::npos &&
               output.find("\nError") == std::string::npos;
    }
    // Records of `type` ("SAMPLE", "LOST_SAMPLES"...) in the whole file; 0 if perf printed none.
    long long count(const std::string& type) const {
        auto it = total.find(type);
        return it == total.end() ? 0 : it->second;
    }
    // Records of `type` in event block `e`.
    long long event_count(size_t e, const std::string& type) const {
        if (e >= events.size()) return -1;
        auto it = events[e].find(type);
        return it == events[e].end() ? 0 : it->second;
    }
    // The per-event blocks summed (LOST_SAMPLES: the samples lost, as perf counts them per event).
    long long events_sum(const std::string& type) const {
        long long n = 0;
        for (size_t e = 0; e < events.size(); ++e) n += event_count(e, type);
        return n;
    }
};

inline PerfStats perf_report_stats(const std::string& perf, const std::string& path) {
    PerfStats s;
    auto r = run_command(perf + " report --stats -i " + path + " 2>&1");
    s.status = r.status;
    s.output = r.output;
    std::istringstream in(r.output);
    std::map<std::string, long long>* block = nullptr;
    const std::regex header("^(\\S.*) stats:$"), count("^\\s*(\\S+) events:\\s+([0-9]+)");
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (std::regex_search(line, m, header)) {
            if (m[1] == "Aggregated") {
                block = &s.total;
            } else {
                s.event_names.push_back(m[1]);
                s.events.emplace_back();
                block = &s.events.back();
            }
        } else if (block && std::regex_search(line, m, count)) {
            (*block)[m[1]] = std::stoll(m[2]);
        }
    }
    return s;
}

// Value of key=N in ringcap's machine-readable summary line, or -1.
inline long long summary_value(const std::string& out, const std::string& key) {
    auto at = out.find("ringcap: samples=");
    if (at == std::string::npos) return -1;
    const std::string line = out.substr(at, out.find('\n', at) - at);
    std::smatch m;
    if (std::regex_search(line, m, std::regex("[ :]" + key + "=([0-9]+)"))) return std::stoll(m[1]);
    return -1;
}

// What `perf script` says on stderr about a file, less its reports of losses ("Processed N events and
// lost M chunks!", "... samples and lost X%!"): those are counted data, checked against the summary
// elsewhere, and a slow build (TSan) or a busy machine loses samples. Anything else is a complaint.
inline std::string perf_script_complaints(const std::string& perf, const std::string& path) {
    auto r = run_command(perf + " script -i " + path + " 2>&1 >/dev/null");
    std::istringstream in(r.output);
    std::string out;
    const std::regex loss("^(Warning:|Processed [0-9]+ (events|samples) and lost .*|Check IO/CPU overload!)\\s*$");
    for (std::string line; std::getline(in, line);)
        if (!line.empty() && !std::regex_match(line, loss)) out += line + "\n";
    if (r.status != 0) out += "perf script exited " + std::to_string(r.status) + "\n";
    return out;
}
