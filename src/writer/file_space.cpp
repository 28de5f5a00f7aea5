#include "ringcap/file_space.hpp"

#include <cerrno>
#include <algorithm>
#include <fcntl.h>
#include <unistd.h>

namespace ringcap {

void FileSpace::write_notice(int fd) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);  // an eventfd: never short, never blocks
}

FileSpace::FileSpace(uint64_t data_offset, bool preallocate)
    : base_(data_offset), next_(data_offset), allocated_end_(data_offset), enabled_(preallocate) {}

uint64_t FileSpace::split(uint64_t offset, uint64_t len) const {
    if (!enabled_.load(std::memory_order_relaxed) || chunk_.load(std::memory_order_relaxed) != kChunk) return len;
    const uint64_t boundary = base_ + ((offset - base_) / kChunk + 1) * kChunk;
    return offset + len > boundary ? boundary - offset : len;
}

bool FileSpace::reserve_limited(uint64_t len, uint64_t* offset) {
    const uint64_t hard = hard_limit_.load(std::memory_order_relaxed);
    uint64_t at = next_.load();
    do {
        if (at + len > hard) return false;
    } while (!next_.compare_exchange_weak(at, at + len));
    *offset = at;
    if (at + len > soft_limit_.load(std::memory_order_relaxed) && !soft_fired_.exchange(true) && on_soft_) on_soft_();
    return true;
}

bool FileSpace::begin_allocation(uint64_t end, uint64_t* offset, uint64_t* len, uint64_t ahead) {
    if (!enabled_.load(std::memory_order_relaxed)) return false;
    const uint64_t have = allocated_end_.load();
    if (end + ahead <= have) return false;
    // --max-size bounds the disk space too, not only the final length.
    const uint64_t hard = hard_limit_.load();
    if (hard != UINT64_MAX && have >= hard) return false;
    bool idle = false;
    if (!busy_.compare_exchange_strong(idle, true)) return false;  // another writer is at it
    *offset = allocated_end_.load();
    *len = chunk_.load();
    if (hard != UINT64_MAX) *len = std::min(*len, hard - *offset);
    return true;
}

void FileSpace::allocate_now(int fd) {
    uint64_t offset = 0, len = 0;
    while (begin_allocation(end(), &offset, &len, kAtSetup)) allocated(::fallocate(fd, 0, off_t(offset), off_t(len)) == 0 ? 0 : -errno);
}

void FileSpace::allocated(int res) {
    if (res == 0) {
        const uint64_t at = allocated_end_.load();
        const uint64_t hard = hard_limit_.load();
        allocated_end_.store(hard == UINT64_MAX ? at + chunk_.load() : std::min(at + chunk_.load(), hard));
    } else if ((res == -ENOSPC || res == -EFBIG || res == -EDQUOT) && chunk_.load() > kMinChunk) {
        chunk_.store(chunk_.load() / 2);
    } else {
        enabled_.store(false);  // EOPNOTSUPP (no fallocate here), or the disk is full: plain appends
    }
    busy_.store(false);
    if (on_allocated_) on_allocated_();
}

}  // namespace ringcap
