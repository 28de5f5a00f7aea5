// Small owners for kernel resources and helpers that turn errno into messages.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ringcap {

// An error that reaches the user as one line. exit_code follows the CLI convention:
// 2 = bad usage or setup refused (nothing was recorded), 1 = failure while recording.
class Error : public std::runtime_error {
public:
    Error(std::string msg, int exit_code = 2) : std::runtime_error(std::move(msg)), exit_code_(exit_code) {}
    int exit_code() const noexcept { return exit_code_; }

private:
    int exit_code_;
};

// The kernel refused ring memory (mmap EPERM/ENOMEM: perf_event_mlock_kb + RLIMIT_MEMLOCK).
class RingMemoryError : public Error {
public:
    using Error::Error;
};

// "strerror(errno) (ENAME)" for messages.
std::string errno_text(int err);

// Move-only owner of a file descriptor.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) noexcept : fd_(fd) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept {
        if (this != &o) reset(std::exchange(o.fd_, -1));
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    void reset(int fd = -1) noexcept;

private:
    int fd_ = -1;
};

// Move-only owner of an mmap'ed region.
class Mapping {
public:
    Mapping() = default;
    Mapping(void* addr, size_t len) noexcept : addr_(addr), len_(len) {}
    Mapping(Mapping&& o) noexcept : addr_(std::exchange(o.addr_, nullptr)), len_(std::exchange(o.len_, 0)) {}
    Mapping& operator=(Mapping&& o) noexcept {
        if (this != &o) {
            reset();
            addr_ = std::exchange(o.addr_, nullptr);
            len_ = std::exchange(o.len_, 0);
        }
        return *this;
    }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping() { reset(); }

    void* get() const noexcept { return addr_; }
    size_t size() const noexcept { return len_; }
    void reset() noexcept;

private:
    void* addr_ = nullptr;
    size_t len_ = 0;
};

// Reads a whole small file (/proc, /sys); nullopt if it cannot be read.
std::optional<std::string> read_text_file(const std::string& path);
// Reads an integer sysctl such as "kernel/perf_event_paranoid"; nullopt if absent.
std::optional<long long> read_sysctl(const std::string& name);

// Parses "0,2-3" into a sorted list without duplicates; nullopt if malformed.
std::optional<std::vector<int>> parse_cpu_list(const std::string& text);
// CPUs the kernel has online (/sys/devices/system/cpu/online).
std::vector<int> online_cpus();
// Highest present CPU + 1.
int possible_cpus();

size_t page_size();

// Runs `work` on a thread of its own and waits at most `limit`. True if it finished; false if it was
// given up on (a syscall that hangs: an NFS or FUSE server gone): it goes on detached, and
// `abandoned` tells it so. `work` may only use what it owns (shared_ptr captures), never the
// caller's stack.
bool run_bounded(std::function<void(const std::atomic<bool>& abandoned)> work, std::chrono::milliseconds limit);

}  // namespace ringcap
