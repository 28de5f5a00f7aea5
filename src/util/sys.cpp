#include "ringcap/sys.hpp"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/mman.h>
#include <unistd.h>

namespace ringcap {

std::string errno_text(int err) {
    const char* name = strerrorname_np(err);
    std::string s = strerror(err);
    if (name) {
        s += " (";
        s += name;
        s += ")";
    }
    return s;
}

void UniqueFd::reset(int fd) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

void Mapping::reset() noexcept {
    if (addr_) ::munmap(addr_, len_);
    addr_ = nullptr;
    len_ = 0;
}

std::optional<std::string> read_text_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::optional<long long> read_sysctl(const std::string& name) {
    auto text = read_text_file("/proc/sys/" + name);
    if (!text) return std::nullopt;
    try {
        return std::stoll(*text);
    } catch (...) {
        return std::nullopt;
    }
}

static bool parse_uint(const std::string& s, int& out) {
    if (s.empty() || s.size() > 7) return false;
    int v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + (c - '0');
    }
    out = v;
    return true;
}

std::optional<std::vector<int>> parse_cpu_list(const std::string& text) {
    std::vector<int> cpus;
    std::string t = text;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    if (t.empty()) return std::nullopt;
    size_t pos = 0;
    while (pos <= t.size()) {
        size_t comma = t.find(',', pos);
        std::string item = t.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        size_t dash = item.find('-');
        int lo, hi;
        if (dash == std::string::npos) {
            if (!parse_uint(item, lo)) return std::nullopt;
            hi = lo;
        } else if (!parse_uint(item.substr(0, dash), lo) || !parse_uint(item.substr(dash + 1), hi) || hi < lo) {
            return std::nullopt;
        }
        for (int c = lo; c <= hi; ++c) cpus.push_back(c);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    return cpus;
}

std::vector<int> online_cpus() {
    auto text = read_text_file("/sys/devices/system/cpu/online");
    if (text) {
        if (auto cpus = parse_cpu_list(*text)) return *cpus;
    }
    std::vector<int> cpus;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n; ++i) cpus.push_back(static_cast<int>(i));
    return cpus;
}

int possible_cpus() {
    auto text = read_text_file("/sys/devices/system/cpu/present");
    if (text) {
        if (auto cpus = parse_cpu_list(*text); cpus && !cpus->empty()) return cpus->back() + 1;
    }
    return static_cast<int>(sysconf(_SC_NPROCESSORS_CONF));
}

size_t page_size() {
    static const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return ps;
}

bool run_bounded(std::function<void(const std::atomic<bool>&)> work, std::chrono::milliseconds limit) {
    struct State {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        std::atomic<bool> abandoned{false};
    };
    auto st = std::make_shared<State>();
    std::thread t([st, work = std::move(work)] {
        work(st->abandoned);
        std::lock_guard lock(st->mu);
        st->done = true;
        st->cv.notify_all();
    });
    std::unique_lock lock(st->mu);
    if (st->cv.wait_for(lock, limit, [&] { return st->done; })) {
        lock.unlock();
        t.join();
        return true;
    }
    st->abandoned.store(true);
    lock.unlock();
    t.detach();  // owns only `st` and what `work` captured
    return false;
}

}  // namespace ringcap
