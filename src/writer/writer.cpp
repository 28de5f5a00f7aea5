#include "ringcap/writer.hpp"

#include <cassert>
#include <cerrno>
#include <cstring>
#include <sys/uio.h>
#include <vector>

namespace ringcap {

namespace {
constexpr uint32_t kMaxEagain = 1000;  // consecutive EAGAINs on one write before we call it an error
constexpr unsigned kDirectFile = 0, kBufferedFile = 1;  // indexes in the files given to the loop
}  // namespace

Writer::Writer(Loop& loop, OutputFile& file, StagingPool& pool, uint64_t data_offset)
    : loop_(loop), file_(file), pool_(pool), slots_(pool.count()), data_offset_(data_offset),
      next_offset_(data_offset), boundaries_(kBoundaries, 0) {
    assert(data_offset % kStagingAlign == 0);
    const int files[2] = {file.direct_fd(), file.buffered_fd()};
    std::vector<iovec> buffers(pool.count());
    for (uint32_t i = 0; i < pool.count(); ++i) buffers[i] = {pool.buffer(i), pool.buffer_size()};
    loop_.attach_output(files, buffers);
}

void Writer::queue_ready() {
    while (pool_.has_ready()) queue(pool_.pop_ready());
}

void Writer::queue_partial() {
    // File offsets follow queue order, and the partial buffer comes after every full one in the
    // stream: queue those first, or the partial buffer would take their place in the file.
    queue_ready();
    if (auto b = pool_.take_partial()) queue(*b);
}

void Writer::queue(const StagingBuffer& b) {
    Slot& s = slots_[b.index];
    assert(!s.busy);
    s = Slot{next_offset_, 0, uint32_t(b.len), 0, true};
    next_offset_ += b.len;
    ++in_flight_;
    if (error_) {
        // After an I/O error nothing more goes to disk; the buffer is accounted as not kept.
        on_completion(b.index, -ECANCELED);
        return;
    }
    issue(b.index);
}

void Writer::issue(uint32_t index) {
    Slot& s = slots_[index];
    const uint32_t len = s.len - s.done;
    // O_DIRECT needs offset and length aligned; the unaligned remainder of a short write and the
    // final partial buffer go through the buffered descriptor instead.
    const bool direct = file_.o_direct() && s.offset % kStagingAlign == 0 && len % kStagingAlign == 0;
    loop_.write(index, direct ? kDirectFile : kBufferedFile, pool_.buffer(index) + s.done, len, s.offset);
    ++stats_.writes;
    if (direct) ++stats_.direct_writes;
}

void Writer::on_completion(uint32_t index, int res) {
    if (index == aside_slot()) {
        aside_busy_ = false;
        if (res != int(aside_len_)) ++stats_.aside_failures;
        return;
    }
    Slot& s = slots_[index];
    assert(s.busy);
    if (fault_ && res != -ECANCELED) res = fault_(s.offset, s.len - s.done, res);
    if (res == -EAGAIN || res == -EINTR) {
        if (++s.eagain <= kMaxEagain) {
            ++stats_.retries;
            issue(index);
            return;
        }
        res = -EAGAIN;
    }
    if (res > 0 && uint32_t(res) < s.len - s.done) {
        // Short write: the kernel took part of it; send the rest from where it stopped.
        ++stats_.short_writes;
        s.done += uint32_t(res);
        s.offset += uint32_t(res);
        stats_.bytes += uint32_t(res);
        s.eagain = 0;
        issue(index);
        return;
    }
    if (res <= 0) {
        // 0 bytes written for a non-empty write means no progress is possible (treat as ENOSPC).
        int err = res == 0 ? ENOSPC : -res;
        if (err != ECANCELED && !error_) error_ = err;
        // s.offset has moved past what a short write got through: that part is on disk.
        if (s.offset < first_failed_offset_) first_failed_offset_ = s.offset;
    } else {
        stats_.bytes += uint32_t(res);
    }
    s.busy = false;
    --in_flight_;
    pool_.release(index);
}

uint64_t Writer::on_disk_end() const {
    // The queued writes tile the data range without gaps and complete in any order: everything
    // below the first byte some write still owes (or the first failure) is on disk. At most
    // count() writes are in flight, so this scan is short.
    uint64_t end = std::min(next_offset_, first_failed_offset_);
    for (const Slot& s : slots_)
        if (s.busy && s.offset < end) end = s.offset;
    return end;
}

uint64_t Writer::bytes_kept() const {
    uint64_t end = first_failed_offset_ == UINT64_MAX ? next_offset_ : first_failed_offset_;
    return end - data_offset_;
}

void Writer::mark_boundary(uint64_t stream_bytes) {
    // Record ends are only known to the caller; keep the recent ones. When the list is full the
    // newest entry is replaced, which only makes the durable size coarser, never wrong.
    if (nboundaries_ > 0 && boundaries_[(first_boundary_ + nboundaries_ - 1) % kBoundaries] >= stream_bytes) return;
    if (nboundaries_ == kBoundaries) {
        boundaries_[(first_boundary_ + nboundaries_ - 1) % kBoundaries] = stream_bytes;
        return;
    }
    boundaries_[(first_boundary_ + nboundaries_) % kBoundaries] = stream_bytes;
    ++nboundaries_;
}

uint64_t Writer::durable_size() {
    // The largest record boundary that lies within the contiguous prefix on disk.
    const uint64_t on_disk = on_disk_end() - data_offset_;
    while (nboundaries_ > 0 && boundaries_[first_boundary_] <= on_disk) {
        durable_ = boundaries_[first_boundary_];
        first_boundary_ = (first_boundary_ + 1) % kBoundaries;
        --nboundaries_;
    }
    return durable_;
}

bool Writer::write_aside(const void* p, size_t len, uint64_t offset) {
    // Off the hot path: a few times a second at most (the crash-safe header).
    if (aside_busy_ || error_ || len > kAsideMax) return false;
    std::memcpy(aside_buf_, p, len);
    aside_len_ = uint32_t(len);
    aside_busy_ = true;
    loop_.write(aside_slot(), kBufferedFile, aside_buf_, aside_len_, offset);
    ++stats_.aside_writes;
    return true;
}

void Writer::wait_idle() {
    struct OnlyWrites final : LoopHandler {
        Writer& w;
        explicit OnlyWrites(Writer& wr) : w(wr) {}
        void on_ring(uint32_t, uint32_t, int) override {}
        void on_write(uint32_t slot, int res) override { w.on_completion(slot, res); }
        void on_source(Source) override {}
    } handler(*this);
    while (in_flight_ > 0 || aside_busy_) loop_.run_once(handler, true);
}

}  // namespace ringcap
