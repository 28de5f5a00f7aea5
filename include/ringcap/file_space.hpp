// The data section's space: file offsets handed out per buffer (an atomic counter, so collectors on
// several threads can share one file), and preallocation ahead of them.
//
// Why preallocate: on ext4 an O_DIRECT write past the end of the file takes the inode lock
// exclusively; under io_uring's nowait attempt that fails, so every append is punted to an io-wq
// worker and appends reach the disk one at a time. A write into blocks that are allocated and inside
// the file size runs inline, as real async I/O. So the file is extended with fallocate (mode 0) in
// large chunks ahead of the writes; it is cut to its real length at the end.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

namespace ringcap {

class FileSpace {
public:
    static constexpr uint64_t kChunk = 64ull << 20;     // fallocate this much at a time
    // While writing, a writer adds a chunk whenever less than kAhead is left beyond the writes. At
    // setup kAtSetup is allocated: a chunk more, which the first write would otherwise start at once
    // (in an io_uring worker, up to 40 ms of CPU, and an idle capture's first write comes seconds in).
    // Under a throttled disk a smaller margin let the writes overtake a slow allocation.
    static constexpr uint64_t kAhead = 128ull << 20;
    static constexpr uint64_t kAtSetup = kAhead + kChunk;
    static constexpr uint64_t kMinChunk = 1ull << 20;   // halving stops here on ENOSPC

    // Data starts at `data_offset`. Without `preallocate` (buffered writes, tmpfs: they never run
    // inline anyway) nothing is allocated ahead.
    FileSpace(uint64_t data_offset, bool preallocate);

    // File offset for `len` bytes of data (one buffer).
    uint64_t reserve(uint64_t len) {
        const uint64_t offset = next_.fetch_add(len);
        tell_growth(offset + len);
        return offset;
    }
    // The same for a collector's buffer under --max-size: false (nothing reserved) when the data
    // would pass the hard limit. Crossing the soft limit calls the callback once (the session then
    // stops the record, so that what is still in the rings and staging fits below the hard one).
    bool reserve_within(uint64_t len, uint64_t* offset) {
        if (hard_limit_.load(std::memory_order_relaxed) == UINT64_MAX) {
            *offset = next_.fetch_add(len);
            tell_growth(*offset + len);
            return true;
        }
        const bool ok = reserve_limited(len, offset);
        if (ok) tell_growth(*offset + len);
        return ok;
    }
    // The session's main thread sleeps until the data grows: this arms a one-shot notice (the first
    // reservation that takes the end to `target` or beyond writes 1 to the eventfd `fd`), unless
    // the end is there already: then nothing is armed and it returns false. A reservation costs
    // one more load for it.
    bool notify_growth(int fd, uint64_t target) {
        // Both sides store, then load the other's variable (seq_cst): either the reservation sees
        // the notice armed, or this sees the reservation's end. Never neither.
        growth_fd_ = fd;  // before the target is published (seq_cst store below)
        growth_target_.store(target, std::memory_order_seq_cst);
        if (next_.load(std::memory_order_seq_cst) < target) return true;
        cancel_growth_notice();
        return false;
    }
    void cancel_growth_notice() { growth_target_.store(UINT64_MAX, std::memory_order_relaxed); }
    // --max-size: data ends at most at `hard` (a file offset); `soft` <= `hard`. The callback is
    // set before the writers start; the limits may be lowered later.
    void on_soft_limit(std::function<void()> f) { on_soft_ = std::move(f); }
    void set_limit(uint64_t soft, uint64_t hard) {
        soft_limit_.store(soft);
        hard_limit_.store(hard);
    }
    bool soft_limit_reached() const { return soft_fired_.load(); }
    // Where the data section starts.
    uint64_t start() const { return base_; }
    // Where the next reservation starts.
    uint64_t end() const { return next_.load(); }

    // Whether writes up to `end` want more space allocated (less than `ahead` allocated beyond them),
    // and no allocation is under way. If so, the caller owns [*offset, *offset + *len): it allocates
    // it and reports with allocated().
    bool begin_allocation(uint64_t end, uint64_t* offset, uint64_t* len, uint64_t ahead = kAhead);
    // The result of that fallocate (0 or -errno). On ENOSPC the next try asks for half (the disk
    // may still have room for part); below kMinChunk, or on any other error, allocation stops and
    // writes simply append (and fail where the disk is full).
    void allocated(int res);
    uint64_t allocated_end() const { return allocated_end_.load(); }
    // An allocation is under way: ext4 holds the inode lock exclusively meanwhile, so an O_DIRECT
    // write issued now would be punted. Writers hold new writes until it is done (staging absorbs it).
    bool allocating() const { return busy_.load(std::memory_order_acquire); }
    // Called (on the allocating writer's thread) when an allocation is done, so that writers of
    // other collectors holding writes for it look again. Set before the writers start.
    void on_allocated(std::function<void()> done) { on_allocated_ = std::move(done); }
    // How much of a write at `offset` of `len` bytes to issue at once: up to the next chunk boundary.
    // ext4 runs an O_DIRECT write inline only if one extent maps all of it, and each fallocated chunk
    // is an extent of its own (64 MiB chunks: unwritten extents hold at most 32767 blocks, so two are
    // never merged); a write across the boundary would be punted. The rest is a second write.
    uint64_t split(uint64_t offset, uint64_t len) const;
    // At setup, before any write: allocates kAtSetup synchronously on `fd`, so the first writes run
    // inline too and start no allocation. Later allocations go through the writers' loops.
    void allocate_now(int fd);
    bool preallocating() const { return enabled_.load(); }

private:
    bool reserve_limited(uint64_t len, uint64_t* offset);
    void tell_growth(uint64_t end) {
        if (end < growth_target_.load(std::memory_order_seq_cst)) return;  // not armed (UINT64_MAX), or not yet
        if (growth_target_.exchange(UINT64_MAX) != UINT64_MAX) write_notice(growth_fd_);
    }
    static void write_notice(int fd);

    const uint64_t base_;  // where the first chunk starts
    std::atomic<uint64_t> next_;
    std::atomic<uint64_t> allocated_end_;
    std::atomic<uint64_t> chunk_{kChunk};
    std::atomic<bool> busy_{false};
    std::atomic<bool> enabled_;
    std::function<void()> on_allocated_;
    std::atomic<uint64_t> soft_limit_{UINT64_MAX}, hard_limit_{UINT64_MAX};
    std::atomic<bool> soft_fired_{false};
    std::atomic<uint64_t> growth_target_{UINT64_MAX};
    int growth_fd_ = -1;
    std::function<void()> on_soft_;
};

}  // namespace ringcap
