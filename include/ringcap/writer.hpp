// Writer: full staging buffers go to the output file as batched writes through the Loop (io_uring
// SQEs, or pwrite on the epoll backend), O_DIRECT where the filesystem allows. A buffer returns to the
// pool only after its write completed in full.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ringcap/loop.hpp"
#include "ringcap/output_file.hpp"
#include "ringcap/staging.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

struct WriterStats {
    uint64_t bytes = 0;          // bytes whose write completed
    uint64_t writes = 0;         // writes issued (including resubmissions)
    uint64_t short_writes = 0;
    uint64_t retries = 0;        // EAGAIN/EINTR resubmissions
    uint64_t direct_writes = 0;
    uint64_t aside_writes = 0;    // write_aside() calls issued (the header refreshes)
    uint64_t aside_failures = 0;
};

// Test seam: given a write's (offset, length) and the kernel's result, returns the result the writer
// sees. Lets tests inject short writes, EAGAIN and EIO deterministically.
using WriteFault = std::function<int(uint64_t offset, uint32_t len, int res)>;

class Writer {
public:
    // Data goes to [data_offset, ...) in the order buffers leave the pool's ready queue.
    // data_offset must be a multiple of kStagingAlign. Attaches the file's descriptors and the
    // pool's buffers to the loop.
    Writer(Loop& loop, OutputFile& file, StagingPool& pool, uint64_t data_offset);

    void set_fault(WriteFault f) { fault_ = std::move(f); }

    // Issues a write for every ready buffer (on io_uring they go out together with the next enter).
    void queue_ready();
    // Issues the full buffers still queued in the pool, then the partly filled current one.
    void queue_partial();
    // Handles a write completion for pool buffer `index`.
    void on_completion(uint32_t index, int res);
    // Runs the loop until no write is in flight; ring and stop events meanwhile are ignored
    // (used at stop, and by tests).
    void wait_idle();

    size_t in_flight() const { return in_flight_; }
    bool failed() const { return error_ != 0; }
    int error() const { return error_; }
    // Bytes handed to the writer so far (end of the data section if every write succeeds).
    uint64_t bytes_queued() const { return next_offset_ - data_offset_; }
    // Bytes from data_offset up to the first failed write.
    uint64_t bytes_kept() const;

    // Tells the writer that the stream is at a record boundary after `stream_bytes` bytes.
    void mark_boundary(uint64_t stream_bytes);
    // The largest marked boundary such that every byte before it is on disk: a data size that
    // perf can read without meeting a partial record.
    uint64_t durable_size();

    // A small write outside the data stream (the file's header): copied, so `p` may go away, and
    // issued through the loop like the data. One at a time: returns false without writing while the
    // previous one is in flight, after a failure, or if len > kAsideMax.
    static constexpr size_t kAsideMax = 512;
    bool write_aside(const void* p, size_t len, uint64_t offset);
    // The loop slot of aside writes (one past the staging buffers).
    uint32_t aside_slot() const { return uint32_t(slots_.size()); }
    const WriterStats& stats() const { return stats_; }

private:
    struct Slot {
        uint64_t offset = 0;  // file offset of the next byte to write
        uint32_t done = 0;    // bytes of this buffer already written
        uint32_t len = 0;     // bytes in this buffer
        uint32_t eagain = 0;
        bool busy = false;
    };
    static constexpr size_t kBoundaries = 64;
    void queue(const StagingBuffer& b);
    uint64_t on_disk_end() const;  // file offset below which every byte is on disk
    void issue(uint32_t index);

    Loop& loop_;
    OutputFile& file_;
    StagingPool& pool_;
    std::vector<Slot> slots_;
    uint64_t data_offset_;
    uint64_t next_offset_;
    std::vector<uint64_t> boundaries_;
    size_t first_boundary_ = 0, nboundaries_ = 0;
    uint64_t durable_ = 0;
    alignas(64) std::byte aside_buf_[kAsideMax];
    uint32_t aside_len_ = 0;
    bool aside_busy_ = false;
    size_t in_flight_ = 0;
    int error_ = 0;
    uint64_t first_failed_offset_ = UINT64_MAX;
    WriteFault fault_;
    WriterStats stats_;
};

}  // namespace ringcap
