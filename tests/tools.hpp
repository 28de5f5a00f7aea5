// Test tools: temp files, running commands, finding perf.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

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

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
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
