#include "ringcap/writer.hpp"

#include <cassert>
#include <cerrno>

namespace ringcap {

namespace {
constexpr uint32_t kMaxEagain = 1000;  // consecutive EAGAINs on one write before we call it an error
}  // namespace

Writer::Writer(Loop& loop, OutputFile& file, StagingPool& pool, uint64_t data_offset)
    : loop_(loop), file_(file), pool_(pool), slots_(pool.count()), data_offset_(data_offset),
      next_offset_(data_offset) {
    assert(data_offset % kStagingAlign == 0);
    loop_.attach_output(file, pool);
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
    issue(b.index);
}

void Writer::issue(uint32_t index) {
    Slot& s = slots_[index];
    const uint32_t len = s.len - s.done;
    // O_DIRECT needs offset and length aligned; the unaligned remainder of a short write and the
    // final partial buffer go through the buffered descriptor instead.
    const bool direct = file_.o_direct() && s.offset % kStagingAlign == 0 && len % kStagingAlign == 0;
    loop_.write(index, direct, pool_.buffer(index) + s.done, len, s.offset);
    ++stats_.writes;
    if (direct) ++stats_.direct_writes;
}

void Writer::on_completion(uint32_t index, int res) {
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

void Writer::wait_idle() {
    struct OnlyWrites final : LoopHandler {
        Writer& w;
        explicit OnlyWrites(Writer& wr) : w(wr) {}
        void on_ring(uint32_t, uint32_t, int) override {}
        void on_write(uint32_t slot, int res) override { w.on_completion(slot, res); }
        void on_source(Source) override {}
    } handler(*this);
    while (in_flight_ > 0) loop_.run_once(handler, true);
}

}  // namespace ringcap
