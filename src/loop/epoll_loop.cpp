// epoll backend, for when io_uring is unavailable. Ring fds and stop sources are watched with epoll;
// writes are done at once with pwrite() and their results handed to the handler on the next
// run_once, exactly as io_uring completions would be, so the writer logic is shared.
#include <cerrno>
#include <fcntl.h>
#include <sstream>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <vector>

#include "ringcap/loop.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

namespace {

enum class Kind : uint8_t { Poll = 1, Source = 3 };
constexpr uint64_t encode(Kind k, uint32_t which, uint32_t index) {
    return (uint64_t(k) << 56) | (uint64_t(which & 0xffff) << 32) | index;
}

class EpollLoop final : public Loop {
public:
    explicit EpollLoop(const LoopConfig& cfg) {
        int fd = epoll_create1(EPOLL_CLOEXEC);
        if (fd < 0) throw Error("epoll_create1: " + errno_text(errno));
        ep_.reset(fd);
        events_.resize(std::max(16u, cfg.rings + unsigned(kSourceCount)));
        done_.reserve(cfg.writes_in_flight + 2);  // + the header write
        delivering_.reserve(cfg.writes_in_flight + 2);
    }

    const char* name() const override { return "epoll"; }
    std::string describe() const override { return "epoll (pwrite writes)"; }

    void watch_ring(uint32_t ring, uint32_t which, int fd, const RingBuffer& mapped) override {
        if (!mapped.valid()) throw Error("internal: poll armed for an fd without a mapped ring", 1);
        // Level-triggered is fine: perf_poll() consumes the readiness it reports.
        add(fd, encode(Kind::Poll, which, ring));
    }

    void unwatch_ring(uint32_t, uint32_t, int fd) override {
        // A hung-up fd stays readable (POLLHUP) forever: it must leave the set.
        epoll_ctl(ep_.get(), EPOLL_CTL_DEL, fd, nullptr);
    }

    void watch_source(Source s, int fd) override { add(fd, encode(Kind::Source, 0, uint32_t(s))); }

    void set_timer(double seconds) override { timer_ = watch_timerfd(Source::Timer, seconds, false); }
    void set_tick(double seconds) override {
        tick_period_ = seconds;
        if (!tick_) {
            tick_ = watch_timerfd(Source::Tick, seconds, true);
            return;
        }
        const itimerspec its = timer_spec(seconds, true);  // from now: the tick just fired
        timerfd_settime(tick_.get(), 0, &its, nullptr);
    }
    void restart_tick(double seconds) override {
        if (!tick_) return;
        itimerspec its = timer_spec(seconds, false);
        its.it_interval = timer_spec(tick_period_, true).it_interval;
        timerfd_settime(tick_.get(), 0, &its, nullptr);
    }

    void attach_output(std::span<const int> files, std::span<const iovec>) override {
        files_.assign(files.begin(), files.end());
    }

    void update_output(unsigned first, std::span<const int> files) override {
        for (size_t i = 0; i < files.size(); ++i) files_.at(first + i) = files[i];
    }

    void write(uint32_t slot, unsigned file, const std::byte* p, uint32_t len, uint64_t offset) override {
        ssize_t n = ::pwrite(files_.at(file), p, len, off_t(offset));
        done_.push_back({slot, n < 0 ? -errno : int(n)});
        ++stats_.writes;
    }

    void fallocate(uint32_t slot, unsigned file, uint64_t offset, uint64_t len) override {
        const int rc = ::fallocate(files_.at(file), 0, off_t(offset), off_t(len));
        done_.push_back({slot, rc == 0 ? 0 : -errno});
    }

    void run_once(LoopHandler& h, bool block) override {
        ++stats_.waits;
        // Completed writes first; if there are any, do not block in epoll_wait.
        delivering_.swap(done_);
        const bool have_done = !delivering_.empty();
        int n = epoll_wait(ep_.get(), events_.data(), int(events_.size()), block && !have_done ? -1 : 0);
        if (n < 0 && errno != EINTR) throw Error("epoll_wait: " + errno_text(errno), 1);
        for (const auto& d : delivering_) h.on_write(d.slot, d.res);
        delivering_.clear();
        for (int i = 0; i < n; ++i) {
            const uint64_t ud = events_[size_t(i)].data.u64;
            const uint32_t index = uint32_t(ud & 0xffffffffu);
            if (Kind(ud >> 56) == Kind::Poll) {
                ++stats_.ring_events;
                h.on_ring(index, uint32_t((ud >> 32) & 0xffff), int(events_[size_t(i)].events & (EPOLLIN | EPOLLHUP | EPOLLERR)));
            } else {
                if (Source(index) == Source::Tick) {
                    uint64_t expirations;
                    (void)!::read(tick_.get(), &expirations, sizeof expirations);  // level-triggered: clear it
                }
                h.on_source(Source(index));
            }
        }
    }

private:
    static itimerspec timer_spec(double seconds, bool periodic) {
        itimerspec its{};
        its.it_value.tv_sec = time_t(seconds);
        its.it_value.tv_nsec = long((seconds - double(its.it_value.tv_sec)) * 1e9);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;  // 0 disarms
        if (periodic) its.it_interval = its.it_value;
        return its;
    }

    UniqueFd watch_timerfd(Source s, double seconds, bool periodic) {
        UniqueFd fd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
        if (!fd) throw Error("timerfd_create: " + errno_text(errno));
        const itimerspec its = timer_spec(seconds, periodic);
        timerfd_settime(fd.get(), 0, &its, nullptr);
        watch_source(s, fd.get());
        return fd;
    }

    void add(int fd, uint64_t data) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = data;
        if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) throw Error("epoll_ctl: " + errno_text(errno));
    }

    struct Done {
        uint32_t slot;
        int res;
    };
    UniqueFd ep_, timer_, tick_;
    double tick_period_ = 0;
    std::vector<epoll_event> events_;
    std::vector<Done> done_, delivering_;
    std::vector<int> files_;
};

}  // namespace

std::unique_ptr<Loop> make_epoll_loop(const LoopConfig& cfg) { return std::make_unique<EpollLoop>(cfg); }

}  // namespace ringcap
