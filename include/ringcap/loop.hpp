// The event loop: one interface, two backends.
//   io_uring: a multishot POLL_ADD per ring owner, writes as SQEs, one io_uring_enter per iteration.
//   epoll:    the fallback when io_uring is unavailable; writes are pwrite() calls whose results are
//             delivered like completions, so the writer and the session run unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <sys/uio.h>

#include "ringcap/ring.hpp"

namespace ringcap {

// Sources the loop watches besides the rings: stop sources, its tick, and a wake-up from another thread.
// Encoded: the encoder thread finished a buffer (-z).
enum class Source : uint8_t { Signal = 0, Child = 1, Timer = 2, Tick = 3, Wake = 4, Encoded = 5 };
inline constexpr size_t kSourceCount = 6;

class LoopHandler {
public:
    virtual ~LoopHandler() = default;
    // Readiness of ring `ring` through its watched fd number `which` (the owner is 0). `revents` is
    // the poll mask (POLLIN, POLLHUP, POLLERR) or -errno if the poll itself failed.
    virtual void on_ring(uint32_t ring, uint32_t which, int revents) = 0;
    virtual void on_write(uint32_t slot, int res) = 0;
    virtual void on_source(Source s) = 0;
};

struct LoopStats {
    uint64_t waits = 0;        // run_once calls: one io_uring_enter or epoll_wait each
    uint64_t ring_events = 0;  // ring readiness notifications (CQEs or epoll events)
    uint64_t rearms = 0;       // io_uring: multishot polls re-armed after a CQE without F_MORE
    uint64_t writes = 0;       // write operations issued
    uint64_t sq_full = 0;      // io_uring: SQEs obtained only after submitting (and reaping) early
};

class Loop {
public:
    virtual ~Loop() = default;
    virtual const char* name() const = 0;
    virtual std::string describe() const = 0;

    // Watches `fd` for ring `ring`. It takes the RingBuffer so that no poll can be armed for an fd
    // without a mapped ring: such a poll reports POLLHUP forever (seed 000). `fd` is the ring owner or,
    // once the owner hung up, another event redirected into the same ring (`which` tells them apart).
    virtual void watch_ring(uint32_t ring, uint32_t which, int fd, const RingBuffer& mapped) = 0;
    // Stops watching a ring's fd after it hung up; late notifications for it are not delivered.
    virtual void unwatch_ring(uint32_t ring, uint32_t which, int fd) = 0;
    // Reports Source s each time fd becomes readable (the handler must consume it, as with epoll).
    virtual void watch_source(Source s, int fd) = 0;
    virtual void set_timer(double seconds) = 0;
    // A periodic Source::Tick (flushes idle staging, hands over what the session collects). A later
    // call, from the tick's handler, sets the period from the next tick on.
    virtual void set_tick(double seconds) = 0;
    // The next tick comes `seconds` from now, then the period again (a round that did the tick's
    // work moves it: an idle collector wakes for the rounds only).
    virtual void restart_tick(double seconds) = 0;

    // Prepares writes to `files` (write() names them by index) from `buffers` (write slot i lies in
    // buffers[i] when i < buffers.size()). io_uring registers both when it can.
    virtual void attach_output(std::span<const int> files, std::span<const iovec> buffers) = 0;
    // Replaces files[first], files[first + 1], ... (rotation: the next output file); writes in
    // flight to the old ones complete there.
    virtual void update_output(unsigned first, std::span<const int> files) = 0;
    // Writes len bytes at p to files[file] at offset; completes through on_write(slot).
    virtual void write(uint32_t slot, unsigned file, const std::byte* p, uint32_t len, uint64_t offset) = 0;
    // Allocates [offset, offset + len) of files[file] (fallocate mode 0: the file grows); completes
    // through on_write(slot) with 0 or -errno.
    virtual void fallocate(uint32_t slot, unsigned file, uint64_t offset, uint64_t len) = 0;

    // Issues what is queued, waits for at least one event when `block`, dispatches all that is ready.
    virtual void run_once(LoopHandler& h, bool block) = 0;

    const LoopStats& stats() const { return stats_; }

protected:
    LoopStats stats_;
};

enum class Backend { Auto, Uring, Epoll };

struct LoopConfig {
    Backend backend = Backend::Auto;
    unsigned rings = 1;            // rings to watch
    unsigned writes_in_flight = 4; // staging buffers
    unsigned cq_entries = 0;       // 0 = 2 x (rings + writes + stop sources), rounded to a power of two
};

// Builds the requested backend. With Backend::Auto a refused io_uring falls back to epoll and
// `fallback_reason` says why in one line.
std::unique_ptr<Loop> make_loop(const LoopConfig& cfg, std::string* fallback_reason);
std::unique_ptr<Loop> make_uring_loop(const LoopConfig& cfg);
std::unique_ptr<Loop> make_epoll_loop(const LoopConfig& cfg);

}  // namespace ringcap
