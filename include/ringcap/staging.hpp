// Staging: a fixed set of 4 KiB-aligned buffers (from mimalloc) that the ring reader fills as one
// byte stream. Full buffers queue for the writer in stream order and come back only after their write
// completed. No allocation after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ringcap {

inline constexpr size_t kStagingAlign = 4096;
inline constexpr size_t kMinStagingBytes = 128 * 1024;

struct StagingBuffer {
    uint32_t index;
    std::byte* data;
    size_t len;  // bytes filled
};

class StagingPool {
public:
    // buffer_size must be a non-zero multiple of kStagingAlign; count >= 2; together at least
    // kMinStagingBytes so that the largest perf record (64 KiB) always fits once writes complete.
    StagingPool(size_t buffer_size, size_t count);
    ~StagingPool();
    StagingPool(const StagingPool&) = delete;
    StagingPool& operator=(const StagingPool&) = delete;

    // Free space in the current buffer, taking a free buffer if there is no current one.
    // Empty when every buffer is full or being written: the caller leaves the rest in the ring.
    std::span<std::byte> writable();
    // Marks n bytes of writable() as filled; a buffer that becomes full moves to the ready queue.
    void commit(size_t n);
    // Appends a small object (e.g. a FINISHED_ROUND record) if it fits in the free space; false if not.
    bool append(const void* src, size_t n);

    // Bytes writable() can still hand out before a write completes.
    size_t free_bytes() const { return (current_ ? buffer_size_ - fill_ : 0) + free_.size() * buffer_size_; }

    // Bytes in the current, partly filled buffer.
    size_t current_fill() const { return current_ ? fill_ : 0; }

    bool has_ready() const { return ready_count_ > 0; }
    // Oldest full buffer, in stream order.
    StagingBuffer pop_ready();
    // The partly filled current buffer, if any (used at stop); it counts as taken until release().
    std::optional<StagingBuffer> take_partial();
    // Gives a buffer back once its write completed.
    void release(uint32_t index);

    size_t buffer_size() const { return buffer_size_; }
    size_t count() const { return buffers_.size(); }
    std::byte* buffer(uint32_t index) const { return buffers_[index]; }
    size_t free_count() const { return free_.size(); }
    uint64_t bytes_committed() const { return bytes_committed_; }

private:
    size_t buffer_size_;
    std::vector<std::byte*> buffers_;
    std::vector<uint32_t> free_;   // stack; capacity reserved up front
    std::vector<uint32_t> ready_;  // circular queue of full buffers
    size_t ready_head_ = 0;
    size_t ready_count_ = 0;
    std::optional<uint32_t> current_;
    size_t fill_ = 0;
    uint64_t bytes_committed_ = 0;
};

}  // namespace ringcap
