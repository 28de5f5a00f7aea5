#include "ringcap/staging.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <mimalloc.h>
#include <new>
#include <stdexcept>
#include <string>
#include <sys/mman.h>

#include "ringcap/records.hpp"

namespace ringcap {

StagingPool::StagingPool(size_t buffer_size, size_t count) : buffer_size_(buffer_size) {
    if (buffer_size < kMinBufferBytes || buffer_size % kStagingAlign != 0 || count < 2)
        throw std::invalid_argument("staging: buffers must be multiples of 4096 of at least 64 KiB, and at least 2");
    buffers_.reserve(count);
    free_.reserve(count);
    ready_.assign(count, 0);
    samples_.assign(count, 0);
    for (size_t i = 0; i < count; ++i) {
        void* p = mi_malloc_aligned(buffer_size, kStagingAlign);
        if (!p) {
            for (auto* b : buffers_) mi_free(b);
            throw std::bad_alloc();
        }
        buffers_.push_back(static_cast<std::byte*>(p));
    }
    // Hand out low indices first, and freed buffers again first: a quiet capture keeps reusing a few
    // buffers, warm in the cache.
    for (size_t i = count; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
}

void StagingPool::prefault() {
    for (auto* b : buffers_) {
#ifdef MADV_POPULATE_WRITE
        if (::madvise(b, buffer_size_, MADV_POPULATE_WRITE) == 0) continue;  // Linux 5.14: one call
#endif
        // Buffers are page-aligned whole pages; their bytes mean nothing until written.
        for (size_t off = 0; off < buffer_size_; off += kStagingAlign) b[off] = std::byte{0};
    }
}

StagingPool::~StagingPool() {
    for (auto* b : buffers_) mi_free(b);
}

std::span<std::byte> StagingPool::writable() {
    if (!current_) {
        if (free_.empty()) return {};
        current_ = free_.back();
        free_.pop_back();
        fill_ = 0;
        samples_[*current_] = 0;
    }
    return {buffers_[*current_] + fill_, buffer_size_ - fill_};
}

void StagingPool::commit(size_t n, uint32_t samples) {
    assert(current_ && fill_ + n <= buffer_size_);
    fill_ += n;
    samples_[*current_] += samples;
    bytes_committed_ += n;
    if (fill_ == buffer_size_) {
        ready_[(ready_head_ + ready_count_) % ready_.size()] = *current_;
        ++ready_count_;
        current_.reset();
        fill_ = 0;
    }
}

void StagingPool::pad(size_t n) {
    // One padding record per at most kMaxRecordBytes (header.size is a u16), zeroed: the buffer may
    // still hold an older write's bytes.
    while (n > 0) {
        const size_t k = std::min(n, kMaxRecordBytes);  // what is left is then a multiple of 8 as well
        std::byte* p = buffers_[*current_] + fill_;
        std::memset(p, 0, k);
        const perf_event_header h{kRecordPadding, 0, uint16_t(k)};
        std::memcpy(p, &h, sizeof h);
        commit(k);
        n -= k;
    }
}

void StagingPool::pad_current() {
    if (current_ && fill_ > 0) pad(buffer_size_ - fill_);
}

void StagingPool::pad_to_alignment() {
    if (current_ && fill_ % kStagingAlign != 0) pad(kStagingAlign - fill_ % kStagingAlign);
}

bool StagingPool::append(const void* record, size_t n) {
    assert(n <= kMaxRecordBytes && n % 8 == 0);
    auto w = writable();
    if (!w.empty() && w.size() < n) {
        // Whole records only: the rest of this buffer becomes padding (if another buffer is free).
        if (free_.empty()) return false;
        pad_current();
        w = writable();
    }
    if (w.size() < n) return false;
    std::memcpy(w.data(), record, n);
    commit(n);
    return true;
}

StagingBuffer StagingPool::pop_ready() {
    assert(ready_count_ > 0);
    uint32_t idx = ready_[ready_head_];
    ready_head_ = (ready_head_ + 1) % ready_.size();
    --ready_count_;
    return {idx, buffers_[idx], buffer_size_, samples_[idx]};
}

StagingBuffer StagingPool::peek_ready() const {
    assert(ready_count_ > 0);
    const uint32_t idx = ready_[ready_head_];
    return {idx, buffers_[idx], buffer_size_, samples_[idx]};
}

std::optional<StagingBuffer> StagingPool::take_partial() {
    if (!current_ || fill_ == 0) return std::nullopt;
    StagingBuffer b{*current_, buffers_[*current_], fill_, samples_[*current_]};
    current_.reset();
    fill_ = 0;
    return b;
}

void StagingPool::release(uint32_t index) {
    // A buffer released twice would later be handed out twice: refuse it even in release builds.
    if (index >= buffers_.size() || free_.size() >= buffers_.size() || (current_ && *current_ == index) ||
        std::find(free_.begin(), free_.end(), index) != free_.end())
        throw std::logic_error("staging: buffer " + std::to_string(index) + " released twice or while in use");
    free_.push_back(index);
}

}  // namespace ringcap
