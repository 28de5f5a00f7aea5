// The encoder off the drain path (-z): a thread of the collector's own that compresses the staging
// buffers it is handed, in order, into scratch areas of its own. Everything else stays on the
// collector's thread: it hands over full staging buffers (submit), and when the thread's eventfd
// says so, places the finished records in its output buffers and gives the staging buffer back.
// So the pools and the io_uring keep one owner each, and the rings are drained while a buffer is
// being compressed (about 0.6 ms per MiB at level 1). No allocation after construction.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "ringcap/encoder.hpp"
#include "ringcap/staging.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

// Staging buffers handed to the encoder thread at a time: enough that it keeps busy while the
// collector waits for the CPU to place what it finished (4 were not, with both CPUs busy), and no
// more than there are staging buffers.
inline constexpr size_t kEncoderSlots = 8;
inline size_t encoder_slots(size_t staging_buffers) { return std::min(kEncoderSlots, staging_buffers); }

// The encoded buffers of a collector with `staging_buffers` staging buffers of `staging_bytes`:
// compressed, the same data needs far fewer on its way to the disk; a quarter (at least 4) keeps
// incompressible data flowing as well.
inline size_t encoded_buffer_count(size_t staging_buffers) { return std::max<size_t>(4, staging_buffers / 4); }
inline size_t encoded_buffer_bytes(size_t staging_bytes) {
    return (ZstdEncoder::max_output(staging_bytes) + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
}
// All the memory -z adds to a collector: encoded buffers, the encoder's scratch and zstd's context.
uint64_t compression_memory(int level, size_t staging_buffers, size_t staging_bytes);

class EncoderThread {
public:
    // `slots` buffers may be handed over before the oldest is taken back.
    // The thread runs SCHED_OTHER at `nice` (0: as it is), never real-time.
    EncoderThread(int level, size_t max_input, size_t slots, int nice = 0);
    ~EncoderThread();  // stops the thread (a buffer it is compressing is finished first)
    EncoderThread(const EncoderThread&) = delete;
    EncoderThread& operator=(const EncoderThread&) = delete;

    // Readable when a buffer is done (watch it on the collector's loop; read it to clear).
    int wake_fd() const { return wake_.get(); }

    // Hands over a staging buffer; false when every slot is taken. It must stay untouched until
    // done() returns it.
    bool submit(const StagingBuffer& in);
    struct Done {
        uint32_t input;                      // the staging buffer, free to release
        std::span<const std::byte> records;  // valid until pop_done()
        uint64_t samples;                    // PERF_RECORD_SAMPLEs compressed into them
    };
    // The oldest buffer that is done, if any; pop_done() takes it back.
    std::optional<Done> done() const;
    void pop_done();
    // Buffers handed over so far, and taken back so far.
    uint64_t submitted() const { return submitted_.load(std::memory_order_relaxed); }
    uint64_t taken() const { return taken_; }
    size_t in_flight() const { return size_t(submitted() - taken_); }

    EncoderStats stats() const;
    // Back-pressure: the level of the frames it starts from now on (taken before each one).
    void set_level(int level) { level_.store(level, std::memory_order_relaxed); }

private:
    void run();

    struct Slot {
        StagingBuffer in{};
        std::unique_ptr<std::byte[]> area;
        std::span<const std::byte> records;
        uint64_t samples = 0;
    };
    ZstdEncoder encoder_;
    std::vector<Slot> slots_;
    int nice_ = 0;
    std::atomic<int> level_;
    UniqueFd wake_;
    // Collector -> thread: slots [completed_, submitted_) hold work. Thread -> collector: slots
    // [taken_, completed_) are done. Release/acquire on both counters hand the slots over.
    std::atomic<uint64_t> submitted_{0};
    std::atomic<uint64_t> completed_{0};
    uint64_t taken_ = 0;  // the collector's
    std::atomic<bool> stop_{false};
    // The encoder's counters, copied after each buffer for the collector's snapshots.
    mutable std::mutex stats_mu_;
    EncoderStats stats_;
    std::thread thread_;
};

}  // namespace ringcap
