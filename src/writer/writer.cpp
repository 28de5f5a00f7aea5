#include "ringcap/writer.hpp"

#include <cassert>
#include <cerrno>
#include <algorithm>
#include <cstring>
#include <sys/uio.h>
#include <vector>

#include <linux/perf_event.h>

#include "ringcap/records.hpp"

namespace ringcap {

namespace {
constexpr uint32_t kMaxEagain = 1000;  // consecutive EAGAIN/EINTR/ECANCELED on one write before it is an error
// Indexes in the files given to the loop: a direct and a buffered descriptor per file, two files
// (rotation alternates, so that the previous file's writes can end while the next one's start).
constexpr unsigned direct_file(uint8_t gen) { return 2u * gen; }
constexpr unsigned buffered_file(uint8_t gen) { return 2u * gen + 1; }
}  // namespace

Writer::Writer(Loop& loop, OutputFile& file, StagingPool& pool, FileSpace& space)
    : loop_(loop), file_{&file, &file}, pool_(pool), space_{&space, &space}, slots_(pool.count()),
      data_offset_(space.end()) {
    assert(data_offset_ % kStagingAlign == 0);
    deferred_.reserve(pool.count());
    const int files[4] = {file.direct_fd(), file.buffered_fd(), file.direct_fd(), file.buffered_fd()};
    std::vector<iovec> buffers(pool.count());
    for (uint32_t i = 0; i < pool.count(); ++i) buffers[i] = {pool.buffer(i), pool.buffer_size()};
    loop_.attach_output(files, buffers);
}

void Writer::switch_to(OutputFile& file, FileSpace& space) {
    assert(deferred_.empty() && !pool_.has_ready() && !allocating_);
    assert(in_flight_gen_[gen_ ^ 1] == 0);
    gen_ ^= 1;
    file_[gen_] = &file;
    space_[gen_] = &space;
    const int files[2] = {file.direct_fd(), file.buffered_fd()};
    loop_.update_output(direct_file(gen_), files);
    // The new file's offsets: what this writer owes and kept is counted there from now on. A
    // failure in the previous file is its own (previous_failed_offset()).
    failed_offset_prev_ = first_failed_offset_;
    data_offset_ = space.start();
    // Also after an error: the buffers it drops from now on are counted in the next file as they come.
    failed_start_ = first_failed_offset_ = UINT64_MAX;
    reserved_end_ = 0;
    published_kept_end_.store(UINT64_MAX);
    published_owed_.store(owed());
}

void Writer::queue_ready() {
    // While an allocation runs, buffers wait in the ready queue, and the rest of a split or short
    // write in deferred_ (FileSpace::allocating).
    if (space().allocating() && !error_) return;
    for (uint32_t index : deferred_) issue(index);
    deferred_.clear();
    // A buffer queued here may start an allocation: the rest wait for it.
    while (pool_.has_ready() && (!space().allocating() || error_)) queue(pool_.pop_ready());
}

void Writer::queue_partial() {
    // File offsets follow queue order, and the partial buffer comes after every full one in the
    // stream: queue those first, or the partial buffer would take their place in the file.
    for (uint32_t index : deferred_) issue(index);
    deferred_.clear();
    while (pool_.has_ready()) queue(pool_.pop_ready());
    if (auto b = pool_.take_partial()) queue(*b);
}

void Writer::queue(const StagingBuffer& b) {
    Slot& s = slots_[b.index];
    assert(!s.busy);
    // Published before the reservation (seq_cst): a reader that sees the reservation sees this debt.
    published_owed_.store(std::min(owed(), space().end()));
    uint64_t offset = 0;
    if (!space().reserve_within(b.len, &offset)) {
        refuse(b);
        published_owed_.store(owed());
        return;
    }
    s = Slot{offset, offset, 0, uint32_t(b.len), 0, false, gen_};
    reserved_end_ = offset + b.len;
    bytes_queued_ += b.len;
    if (error_) {
        // After an I/O error nothing more goes to disk; the buffer is accounted as not kept.
        note_failure(s);
        pool_.release(b.index);
        published_owed_.store(owed());
        return;
    }
    s.busy = true;
    ++in_flight_;
    ++in_flight_gen_[gen_];
    if (offset + b.len > space().allocated_end() && space().preallocating()) ++stats_.beyond_allocation;
    // Its SQE would follow the fallocate's into the same submit, and find the inode lock taken (a
    // punted write): it goes out once the allocation is done, at its reserved offset.
    if (space().allocating()) {
        deferred_.push_back(b.index);
        return;
    }
    issue(b.index);
    // After the write: SQEs are issued in order at submit, so this write was tried inline before the
    // fallocate starts in its worker; later ones wait for it (queue_ready).
    preallocate(offset + b.len);
}

void Writer::refuse(const StagingBuffer& b) {
    // --max-size: the file is full. The buffer's records are counted, not written (the session
    // stops the record well before this when it can: FileSpace's soft limit).
    ++stats_.refused_buffers;
    stats_.refused_bytes += b.len;
    const std::byte* p = pool_.buffer(b.index);
    stats_.refused_samples += count_records(p, b.len, PERF_RECORD_SAMPLE);
    stats_.refused_compressed += count_records(p, b.len, kRecordCompressed);
    pool_.release(b.index);
}

void Writer::preallocate(uint64_t end) {
    uint64_t offset = 0, len = 0;
    if (!space().begin_allocation(end, &offset, &len)) return;
    loop_.fallocate(prealloc_slot(), direct_file(gen_), offset, len);
    prealloc_gen_ = gen_;
    allocating_ = true;
    ++stats_.preallocations;
}

void Writer::issue(uint32_t index) {
    Slot& s = slots_[index];
    // Up to a preallocated chunk's end at once (FileSpace::split); the completion sends the rest, as
    // for a short write.
    const uint32_t len = uint32_t(space_[s.gen]->split(s.offset, s.len - s.done));
    if (len < s.len - s.done) ++stats_.split_writes;
    // O_DIRECT needs offset and length aligned; the unaligned remainder of a short write and the
    // final partial buffer go through the buffered descriptor instead.
    const bool direct = file_[s.gen]->o_direct() && s.offset % kStagingAlign == 0 && len % kStagingAlign == 0;
    loop_.write(index, direct ? direct_file(s.gen) : buffered_file(s.gen), pool_.buffer(index) + s.done, len, s.offset);
    ++stats_.writes;
    if (direct) ++stats_.direct_writes;
}

void Writer::on_completion(uint32_t index, int res) {
    if (index == prealloc_slot()) {
        allocating_ = false;
        space_[prealloc_gen_]->allocated(res);
        return;
    }
    Slot& s = slots_[index];
    assert(s.busy);
    if (fault_) res = fault_(s.offset, s.len - s.done, res);
    // ECANCELED: this write SQE (never linked, never cancelled by us) was cancelled before it ran,
    // by io-wq that could not start a worker for it or by the ring going away. Nothing of it reached
    // the file and it may be sent again at its offset; a lasting cause ends as an error below.
    if (res == -EAGAIN || res == -EINTR || res == -ECANCELED) {
        if (++s.eagain <= kMaxEagain) {
            ++stats_.retries;
            issue(index);
            return;
        }
        if (res == -EINTR) res = -EAGAIN;
    }
    if (res > 0 && uint32_t(res) < s.len - s.done) {
        // Short write: the kernel took part of it; send the rest from where it stopped.
        ++stats_.short_writes;
        s.done += uint32_t(res);
        s.offset += uint32_t(res);
        stats_.bytes += uint32_t(res);
        s.eagain = 0;
        if (space_[s.gen]->allocating()) deferred_.push_back(index);  // resumed by queue_ready()
        else issue(index);
        return;
    }
    if (res <= 0) {
        // 0 bytes written for a non-empty write means no progress is possible (treat as ENOSPC).
        const int err = res == 0 ? ENOSPC : -res;
        if (!error_) error_ = err;
        note_failure(s);
    } else {
        stats_.bytes += uint32_t(res);
    }
    s.busy = false;
    --in_flight_;
    --in_flight_gen_[s.gen];
    pool_.release(index);
    published_owed_.store(owed());
}

void Writer::note_failure(const Slot& s) {
    // s.offset has moved past what a short write got through: that part is on disk.
    if (s.gen != gen_) {
        failed_offset_prev_ = std::min(failed_offset_prev_, s.offset);  // the previous file's
        return;
    }
    if (s.offset < first_failed_offset_) first_failed_offset_ = s.offset;
    if (s.start < failed_start_) failed_start_ = s.start;
    published_kept_end_.store(first_failed_offset_);
}

uint64_t Writer::owed() const {
    uint64_t owed = failed_start_;
    for (const Slot& s : slots_)
        if (s.busy && s.gen == gen_ && s.start < owed) owed = s.start;
    return owed;
}

uint64_t Writer::durable_size() const { return std::min(space().end(), owed()) - data_offset_; }

uint64_t Writer::bytes_kept() const {
    const uint64_t end = first_failed_offset_ == UINT64_MAX ? space().end() : first_failed_offset_;
    return end - data_offset_;
}

namespace {
// Completions, and the sources (tick, wake-up) for `sources` if given: they must be consumed, or a
// level-triggered wake-up eventfd would keep epoll returning at once. Ring events meanwhile are
// ignored (the rings are drained by passes that do not depend on them).
struct OnlyWrites final : LoopHandler {
    Writer& w;
    LoopHandler* sources;
    OnlyWrites(Writer& wr, LoopHandler* s) : w(wr), sources(s) {}
    // Ring events go on to the collector: data needs nothing now (the next pass drains it), but a
    // hang-up is reported once (a multishot poll ends with it) and must retire its fd.
    void on_ring(uint32_t ring, uint32_t which, int revents) override {
        if (sources) sources->on_ring(ring, which, revents);
    }
    void on_write(uint32_t slot, int res) override { w.on_completion(slot, res); }
    void on_source(Source s) override {
        if (sources) sources->on_source(s);
    }
};
}  // namespace

void Writer::wait_idle(LoopHandler* sources) {
    OnlyWrites handler(*this, sources);
    // Buffers held for an allocation (ready or deferred) go out once it is done. Another collector's
    // allocation completes on its own loop, which then wakes this one (FileSpace::on_allocated).
    // This writer's own allocation is waited for too: the others may be holding writes for it.
    for (;;) {
        queue_ready();  // holds everything itself while an allocation runs
        if (in_flight_ == 0 && !pool_.has_ready() && !allocating_) return;
        loop_.run_once(handler, true);
    }
}

void Writer::settle_allocation(LoopHandler* sources) {
    OnlyWrites handler(*this, sources);
    while (allocating_) loop_.run_once(handler, true);
}

}  // namespace ringcap
