#include "ringcap/staging.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <mimalloc.h>
#include <new>
#include <stdexcept>
#include <string>

namespace ringcap {

StagingPool::StagingPool(size_t buffer_size, size_t count) : buffer_size_(buffer_size) {
    if (buffer_size == 0 || buffer_size % kStagingAlign != 0 || count < 2 || buffer_size * count < kMinStagingBytes)
        throw std::invalid_argument("staging: buffers must be multiples of 4096, at least 2, 128 KiB in all");
    buffers_.reserve(count);
    free_.reserve(count);
    ready_.assign(count, 0);
    for (size_t i = 0; i < count; ++i) {
        void* p = mi_malloc_aligned(buffer_size, kStagingAlign);
        if (!p) {
            for (auto* b : buffers_) mi_free(b);
            throw std::bad_alloc();
        }
        buffers_.push_back(static_cast<std::byte*>(p));
    }
    // Hand out low indices first so a quiet capture touches few buffers.
    for (size_t i = count; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
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
    }
    return {buffers_[*current_] + fill_, buffer_size_ - fill_};
}

void StagingPool::commit(size_t n) {
    assert(current_ && fill_ + n <= buffer_size_);
    fill_ += n;
    bytes_committed_ += n;
    if (fill_ == buffer_size_) {
        ready_[(ready_head_ + ready_count_) % ready_.size()] = *current_;
        ++ready_count_;
        current_.reset();
        fill_ = 0;
    }
}

bool StagingPool::append(const void* src, size_t n) {
    // Small records may straddle two buffers, as ring bytes do: the file is one byte stream.
    const auto* p = static_cast<const std::byte*>(src);
    // Check the space first so a record is never half-appended.
    if (free_bytes() < n) return false;
    while (n > 0) {
        auto w = writable();
        size_t k = std::min(n, w.size());
        std::memcpy(w.data(), p, k);
        commit(k);
        p += k;
        n -= k;
    }
    return true;
}

StagingBuffer StagingPool::pop_ready() {
    assert(ready_count_ > 0);
    uint32_t idx = ready_[ready_head_];
    ready_head_ = (ready_head_ + 1) % ready_.size();
    --ready_count_;
    return {idx, buffers_[idx], buffer_size_};
}

std::optional<StagingBuffer> StagingPool::take_partial() {
    if (!current_ || fill_ == 0) return std::nullopt;
    StagingBuffer b{*current_, buffers_[*current_], fill_};
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
