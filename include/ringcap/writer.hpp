// Writer: full staging buffers go to the output file as batched writes through the Loop (io_uring
// SQEs, or pwrite on the epoll backend), O_DIRECT where the filesystem allows. A buffer returns to the
// pool only after its write completed in full.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ringcap/file_space.hpp"
#include "ringcap/loop.hpp"
#include "ringcap/output_file.hpp"
#include "ringcap/staging.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

struct WriterStats {
    uint64_t bytes = 0;          // bytes whose write completed
    uint64_t writes = 0;         // writes issued (including resubmissions)
    uint64_t short_writes = 0;   // includes the first halves of split writes
    uint64_t split_writes = 0;   // writes cut at a preallocated chunk's end
    uint64_t retries = 0;        // EAGAIN/EINTR/ECANCELED resubmissions
    uint64_t direct_writes = 0;
    uint64_t preallocations = 0;  // fallocate calls issued ahead of the writes
    uint64_t beyond_allocation = 0;  // writes that went past the allocated part (appends: punted)
    // --max-size: buffers refused because the file would pass the limit (not written; counted).
    uint64_t refused_buffers = 0;
    uint64_t refused_bytes = 0;
    uint64_t refused_samples = 0;     // PERF_RECORD_SAMPLEs in them (uncompressed buffers)
    uint64_t refused_compressed = 0;  // COMPRESSED records in them (-z: their samples are not counted)
};

// Test seam: given a write's (offset, length) and the kernel's result, returns the result the writer
// sees. Lets tests inject short writes, EAGAIN, ECANCELED and EIO deterministically.
using WriteFault = std::function<int(uint64_t offset, uint32_t len, int res)>;

class Writer {
public:
    // Each buffer that leaves the pool's ready queue gets its file offset from `space` (shared with
    // other writers of the file), which starts at the data section, a multiple of kStagingAlign; the
    // writer also keeps the file allocated ahead of its writes (FileSpace). Attaches the file's
    // descriptors and the pool's buffers to the loop.
    Writer(Loop& loop, OutputFile& file, StagingPool& pool, FileSpace& space);

    void set_fault(WriteFault f) { fault_ = std::move(f); }

    // Rotation (--switch-output): buffers queued from now on go to `file`, at offsets from `space`;
    // writes in flight to the previous file complete there. Call after queue_partial() (what was
    // staged so far belongs to the previous file). The previous file must be complete (previous_in_flight()
    // 0) before the next switch.
    void switch_to(OutputFile& file, FileSpace& space);
    // Writes still in flight to the previous file, and the offset in it of the first byte a failed
    // write did not get to disk (UINT64_MAX: none failed).
    size_t previous_in_flight() const { return in_flight_gen_[gen_ ^ 1]; }
    uint64_t previous_failed_offset() const { return failed_offset_prev_; }

    // Issues a write for every ready buffer (on io_uring they go out together with the next enter).
    void queue_ready();
    // Issues the full buffers still queued in the pool, then the partly filled current one.
    void queue_partial();
    // Handles a write completion for pool buffer `index`.
    void on_completion(uint32_t index, int res);
    // Runs the loop until every ready buffer is written and no write is in flight; ring events and
    // sources (tick, wake-up) meanwhile go to `sources` (used at stop, and by tests).
    void wait_idle(LoopHandler* sources = nullptr);
    // Runs the loop until this writer's allocation, if one is under way, is done: writers of other
    // collectors may hold their writes for it (used when a collector leaves its run loop).
    void settle_allocation(LoopHandler* sources = nullptr);

    size_t in_flight() const { return in_flight_; }
    bool failed() const { return error_ != 0; }
    int error() const { return error_; }
    // Bytes handed to this writer so far.
    uint64_t bytes_queued() const { return bytes_queued_; }
    // Bytes from the data section's start up to the first byte a failed write did not get to disk
    // (a short write's part that did is included). For the only writer of a file.
    uint64_t bytes_kept() const;

    // The file offset of the first buffer this writer still owes (queued, not wholly written, or
    // failed), or UINT64_MAX. Every buffer holds whole records, so below the lowest owed offset of
    // all writers of a file (and the space reserved so far) the data is on disk and ends at a
    // record boundary: a data size perf reads without meeting a partial record.
    uint64_t owed() const;
    // The end of the last buffer queued to the current file (0: none yet): once owed() is at or
    // past it, everything queued so far is on disk.
    uint64_t reserved_end() const { return reserved_end_; }
    // That data size for the only writer of a file.
    uint64_t durable_size() const;
    // For another thread (the record session), with the file's other writers: owed() as published
    // before each reservation (so whoever sees a reservation sees the debt) and after each
    // completion, and the end of what was kept up to this writer's first failure; both in the
    // current file (a switch starts them again).
    uint64_t published_owed() const { return published_owed_.load(); }
    uint64_t published_kept_end() const { return published_kept_end_.load(); }

    // The loop slot of preallocations (past the staging buffers).
    uint32_t prealloc_slot() const { return uint32_t(slots_.size()); }
    const WriterStats& stats() const { return stats_; }

private:
    struct Slot {
        uint64_t start = 0;   // file offset of the buffer
        uint64_t offset = 0;  // file offset of the next byte to write
        uint32_t done = 0;    // bytes of this buffer already written
        uint32_t len = 0;     // bytes in this buffer
        uint32_t eagain = 0;
        bool busy = false;
        uint8_t gen = 0;      // which file (rotation alternates between two)
    };
    void queue(const StagingBuffer& b);
    void issue(uint32_t index);
    void preallocate(uint64_t end);
    void refuse(const StagingBuffer& b);
    // Slot `s` did not reach the file from s.offset on: where its file's kept data ends.
    void note_failure(const Slot& s);
    FileSpace& space() const { return *space_[gen_]; }

    Loop& loop_;
    // The current file and its space, and the previous ones (index gen_ ^ 1) while their writes end.
    OutputFile* file_[2];
    StagingPool& pool_;
    FileSpace* space_[2];
    uint8_t gen_ = 0;
    uint8_t prealloc_gen_ = 0;  // the file the allocation in flight is for
    size_t in_flight_gen_[2] = {0, 0};
    uint64_t failed_offset_prev_ = UINT64_MAX;
    std::vector<Slot> slots_;
    uint64_t data_offset_;
    uint64_t bytes_queued_ = 0;
    uint64_t failed_start_ = UINT64_MAX;  // start of the first buffer whose write failed
    bool allocating_ = false;             // this writer's fallocate is in flight
    std::vector<uint32_t> deferred_;      // slots (or their rest) waiting for an allocation to finish
    alignas(64) std::atomic<uint64_t> published_owed_{UINT64_MAX};
    std::atomic<uint64_t> published_kept_end_{UINT64_MAX};
    size_t in_flight_ = 0;
    uint64_t reserved_end_ = 0;
    int error_ = 0;
    uint64_t first_failed_offset_ = UINT64_MAX;
    WriteFault fault_;
    WriterStats stats_;
};

}  // namespace ringcap
