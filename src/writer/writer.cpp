#include "ringcap/writer.hpp"

#include <cassert>
#include <cerrno>
#include <sys/uio.h>

namespace ringcap {

namespace {
constexpr int kDirectFile = 0;    // registered file indexes
constexpr int kBufferedFile = 1;
constexpr uint32_t kMaxEagain = 1000;  // consecutive EAGAINs on one write before we call it an error
}  // namespace

Writer::Writer(Uring& ring, OutputFile& file, StagingPool& pool, uint64_t data_offset)
    : ring_(ring), file_(file), pool_(pool), slots_(pool.count()), data_offset_(data_offset),
      next_offset_(data_offset) {
    assert(data_offset % kStagingAlign == 0);
    // Registered buffers spare the kernel a page pin per write; registered files an fd lookup.
    // Both are optional: without them we use plain writes (e.g. when RLIMIT_MEMLOCK is small).
    std::vector<iovec> iov(pool.count());
    for (size_t i = 0; i < pool.count(); ++i) iov[i] = {pool.buffer(uint32_t(i)), pool.buffer_size()};
    registered_ = io_uring_register_buffers(ring.raw(), iov.data(), unsigned(iov.size())) == 0;
    int fds[2] = {file.direct_fd(), file.buffered_fd()};
    if (io_uring_register_files(ring.raw(), fds, 2) != 0)
        throw Error("io_uring_register_files failed for '" + file.path() + "'", 1);
}

void Writer::queue_ready() {
    while (pool_.has_ready()) queue(pool_.pop_ready());
}

void Writer::queue_partial() {
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
    prep(b.index);
}

void Writer::prep(uint32_t index) {
    Slot& s = slots_[index];
    const uint32_t len = s.len - s.done;
    std::byte* src = pool_.buffer(index) + s.done;
    // O_DIRECT needs offset and length aligned; the unaligned remainder of a short write and the
    // final partial buffer go through the buffered descriptor instead.
    const bool aligned = file_.o_direct() && s.offset % kStagingAlign == 0 && len % kStagingAlign == 0;
    const int file = aligned ? kDirectFile : kBufferedFile;
    io_uring_sqe* sqe = ring_.sqe();
    if (registered_) {
        io_uring_prep_write_fixed(sqe, file, src, len, s.offset, int(index));
        ++stats_.fixed_writes;
    } else {
        io_uring_prep_write(sqe, file, src, len, s.offset);
    }
    sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, make_tag(Tag::Write, index));
    ++stats_.writes;
    if (aligned) ++stats_.direct_writes;
}

void Writer::on_completion(uint32_t index, int res) {
    Slot& s = slots_[index];
    assert(s.busy);
    if (fault_ && res != -ECANCELED) res = fault_(s.offset, s.len - s.done, res);
    if (res == -EAGAIN || res == -EINTR) {
        if (++s.eagain <= kMaxEagain) {
            ++stats_.retries;
            prep(index);
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
        prep(index);
        return;
    }
    if (res <= 0) {
        // 0 bytes written for a non-empty write means no progress is possible (treat as ENOSPC).
        int err = res == 0 ? ENOSPC : -res;
        if (err != ECANCELED && !error_) error_ = err;
        if (s.offset < first_failed_offset_) first_failed_offset_ = s.offset;
    } else {
        stats_.bytes += uint32_t(res);
    }
    s.busy = false;
    --in_flight_;
    pool_.release(index);
}

uint64_t Writer::bytes_kept() const {
    uint64_t end = first_failed_offset_ == UINT64_MAX ? next_offset_ : first_failed_offset_;
    return end - data_offset_;
}

void Writer::wait_idle(const std::function<void(const io_uring_cqe&)>& other) {
    while (in_flight_ > 0) {
        int rc = ring_.submit_and_wait(1);
        if (rc < 0 && rc != -EINTR && rc != -ETIME && rc != -EAGAIN && rc != -EBUSY)
            throw Error("io_uring_enter failed while flushing: " + errno_text(-rc), 1);
        io_uring_cqe* cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(ring_.raw(), head, cqe) {
            ++seen;
            io_uring_cqe c = *cqe;
            if (tag_kind(c.user_data) == Tag::Write) on_completion(tag_index(c.user_data), c.res);
            else if (other) other(c);
        }
        io_uring_cq_advance(ring_.raw(), seen);
    }
}

}  // namespace ringcap
