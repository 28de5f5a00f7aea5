#include "ringcap/encoder_thread.hpp"

#include <cstdio>
#include <cstdlib>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

namespace ringcap {

uint64_t compression_memory(int level, size_t staging_buffers, size_t staging_bytes) {
    return uint64_t(encoded_buffer_count(staging_buffers)) * encoded_buffer_bytes(staging_bytes) +
           uint64_t(encoder_slots(staging_buffers) + 1) * ZstdEncoder::records_area(staging_bytes) +
           ZstdEncoder::context_bytes(level, staging_bytes);
}

EncoderThread::EncoderThread(int level, size_t max_input, size_t slots, int nice)
    : encoder_(level, max_input), slots_(slots), nice_(nice), level_(level) {
    for (auto& s : slots_) s.area = std::make_unique<std::byte[]>(ZstdEncoder::records_area(max_input));
    wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_) throw Error("eventfd: " + errno_text(errno));
    thread_ = std::thread([this] { run(); });
}

EncoderThread::~EncoderThread() {
    // The thread waits for the counter to change: change it (the thread checks stop_ first).
    stop_.store(true, std::memory_order_release);
    submitted_.fetch_add(1, std::memory_order_release);
    submitted_.notify_one();
    thread_.join();
}

bool EncoderThread::submit(const StagingBuffer& in) {
    const uint64_t n = submitted_.load(std::memory_order_relaxed);
    if (n - taken_ >= slots_.size()) return false;
    slots_[n % slots_.size()].in = in;
    // RELEASE: the slot (and the staging bytes, written before) are the thread's once it sees n + 1.
    submitted_.store(n + 1, std::memory_order_release);
    submitted_.notify_one();
    return true;
}

std::optional<EncoderThread::Done> EncoderThread::done() const {
    // ACQUIRE pairs with the thread's release of completed_: the slot's records are written.
    if (taken_ == completed_.load(std::memory_order_acquire)) return std::nullopt;
    const Slot& s = slots_[taken_ % slots_.size()];
    return Done{s.in.index, s.records, s.samples};
}

void EncoderThread::pop_done() { ++taken_; }

EncoderStats EncoderThread::stats() const {
    std::lock_guard lock(stats_mu_);
    return stats_;
}

void EncoderThread::run() {
    // Never real-time, whatever its creator runs at: zstd at SCHED_FIFO would starve the workload.
    // At the collectors' nice otherwise (a nice refused is the collector's to report).
    const sched_param normal{};
    ::sched_setscheduler(0, SCHED_OTHER, &normal);
    if (nice_ != 0) ::setpriority(PRIO_PROCESS, ::gettid(), nice_);
    uint64_t next = 0;  // the next slot to compress
    for (;;) {
        // ACQUIRE pairs with submit()'s release: the slot and its staging buffer are complete.
        submitted_.wait(next, std::memory_order_acquire);  // returns at once if there is work
        if (stop_.load(std::memory_order_acquire)) return;
        Slot& s = slots_[next % slots_.size()];
        try {
            // Counted by the reader as it staged them; the collector adds them up as it places the
            // frame (which file a frame lands in is only known then: per-file counts with rotation).
            s.samples = s.in.samples;
            encoder_.set_level(level_.load(std::memory_order_relaxed));
            s.records = encoder_.compress({s.in.data, s.in.len}, s.area.get());
        } catch (const std::exception& e) {
            // zstd allocated everything up front: only a bug gets here. Losing data silently is
            // worse than stopping.
            std::fprintf(stderr, "ringcap: compression failed: %s\n", e.what());
            std::abort();
        }
        {
            std::lock_guard lock(stats_mu_);  // once per staging buffer, and snapshots are rare
            stats_ = encoder_.stats();
        }
        ++next;
        // RELEASE: the records are written before the collector sees the slot done.
        completed_.store(next, std::memory_order_release);
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t w = ::write(wake_.get(), &one, sizeof one);
    }
}

}  // namespace ringcap
