// Staging: a fixed set of 4 KiB-aligned buffers (from mimalloc) that the ring reader fills with
// records. A buffer holds whole records only (several collectors' buffers interleave in one file):
// when the next record does not fit in what is left, the rest is padding (PERF_RECORD_FINISHED_INIT,
// which perf skips). Full buffers queue for the writer in fill order and come back only after their
// write completed. No allocation after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ringcap {

inline constexpr size_t kStagingAlign = 4096;
inline constexpr size_t kMinBufferBytes = 64 * 1024;   // the largest record fits in a buffer
inline constexpr size_t kMinStagingBytes = 2 * kMinBufferBytes;

struct StagingBuffer {
    uint32_t index;
    std::byte* data;
    size_t len;  // bytes filled
    uint32_t samples = 0;  // PERF_RECORD_SAMPLEs in it, as the reader committed them
};

class StagingPool {
public:
    // buffer_size must be a multiple of kStagingAlign and at least kMinBufferBytes (the largest perf
    // record fits); count >= 2.
    StagingPool(size_t buffer_size, size_t count);
    ~StagingPool();
    StagingPool(const StagingPool&) = delete;
    StagingPool& operator=(const StagingPool&) = delete;

    // Free space in the current buffer, taking a free buffer if there is no current one.
    // Empty when every buffer is full or being written: the caller leaves the rest in the ring.
    std::span<std::byte> writable();
    // Marks n bytes of writable() as filled, ending at a record boundary, `samples` of them samples
    // (counted where the reader walks the headers anyway: -z's encoder would otherwise walk them
    // again, cache-cold, in another thread); a buffer that becomes full moves to the ready queue.
    void commit(size_t n, uint32_t samples = 0);
    // The next record does not fit in what is left of the current buffer: pads the rest and queues it.
    void pad_current();
    // Pads the current buffer up to the next 4 KiB boundary, so that a partial write of it keeps the
    // file O_DIRECT-aligned.
    void pad_to_alignment();
    // Appends one whole record (synthesized ones, FINISHED_ROUND, LOST_SAMPLES): in the current
    // buffer if it fits, else in the next one after padding. False, with nothing written, when no
    // buffer is free.
    bool append(const void* record, size_t n);

    // Bytes writable() can still hand out before a write completes.
    size_t free_bytes() const { return (current_ ? buffer_size_ - fill_ : 0) + free_.size() * buffer_size_; }

    // Bytes in the current, partly filled buffer.
    size_t current_fill() const { return current_ ? fill_ : 0; }

    bool has_ready() const { return ready_count_ > 0; }
    size_t ready_count() const { return ready_count_; }
    // Oldest full buffer, in stream order; peek_ready() leaves it queued.
    StagingBuffer pop_ready();
    StagingBuffer peek_ready() const;
    // The partly filled current buffer, if any (used at stop); it counts as taken until release().
    std::optional<StagingBuffer> take_partial();
    // Gives a buffer back once its write completed.
    void release(uint32_t index);

    // Faults every page in now, at setup, so that no drain takes a page fault on a buffer's first
    // use. Buffers registered with io_uring are pinned (so faulted in) anyway; -z's input buffers
    // are not, and at 40 kHz dwarf their first use cost 1700-2800 samples in the first 0.1 s.
    void prefault();

    size_t buffer_size() const { return buffer_size_; }
    size_t count() const { return buffers_.size(); }
    std::byte* buffer(uint32_t index) const { return buffers_[index]; }
    size_t free_count() const { return free_.size(); }
    uint64_t bytes_committed() const { return bytes_committed_; }

private:
    void pad(size_t n);  // n padding bytes (a multiple of 8) in the current buffer

    size_t buffer_size_;
    std::vector<std::byte*> buffers_;
    std::vector<uint32_t> free_;   // stack; capacity reserved up front
    std::vector<uint32_t> ready_;  // circular queue of full buffers
    std::vector<uint32_t> samples_;  // per buffer, since it was last taken
    size_t ready_head_ = 0;
    size_t ready_count_ = 0;
    std::optional<uint32_t> current_;
    size_t fill_ = 0;
    uint64_t bytes_committed_ = 0;
};

}  // namespace ringcap
