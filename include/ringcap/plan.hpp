// The record plan: every setting derived from the options, the ring source and the machine, computed
// once and in one place, without touching the kernel (in the spirit of Perfetto's EventConfig):
// ring size, wake-up policy, attrs, staging geometry and the loop's sizing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <linux/perf_event.h>
#include <optional>
#include <string>
#include <vector>

#include "ringcap/loop.hpp"
#include "ringcap/options.hpp"
#include "ringcap/source.hpp"
#include "ringcap/staging.hpp"

namespace ringcap {

// What the plan needs to know about the machine; read once by current().
struct HostLimits {
    size_t page_size = 4096;
    bool can_lock_memory = false;             // CAP_IPC_LOCK: ring memory is not capped by mlock limits
    std::optional<uint64_t> max_sample_rate;  // kernel.perf_event_max_sample_rate
    // The memory cgroup's limit (the lowest memory.max / memory.limit_in_bytes from this process's
    // cgroup up) and what the cgroup uses now; the kernel kills the record if it goes over.
    std::optional<uint64_t> memory_limit;
    uint64_t memory_usage = 0;
    std::string memory_limit_file;  // where the limit was read, for messages
    static HostLimits current();
};

// The memory cgroup limit of this process, read from /proc/self/cgroup and cgroupfs (v2 or v1).
void read_memory_cgroup(HostLimits& h);

// The default ring size (-m) for `rings` rings. Without CAP_IPC_LOCK, perf's 128 data pages: with the
// control page that is the 516 KiB of kernel.perf_event_mlock_kb's default. With it, the limit does
// not apply and bigger rings ride out scheduling and write stalls (README, Performance): 8 MiB per
// ring, smaller when there are many rings so that all of them take at most 256 MiB.
size_t default_ring_pages(size_t rings, bool can_lock_memory, size_t page_size);

class RecordPlan {
public:
    // The smallest ring the record falls back to when locked memory is short (16 KiB).
    static constexpr size_t kMinRingPages = 4;
    // Staging when --staging-buffers is not given: twice the rings' data, within these bounds
    // (default_staging_bytes), in buffers of --staging-kb (1 MiB).
    static constexpr uint64_t kMinStagingBytes = 64u << 20, kMaxStagingBytes = 256u << 20;
    static uint64_t default_staging_bytes(uint64_t ring_bytes);
    // --flight-recorder's: half the rings' data, within these bounds (flight_staging_bytes).
    static constexpr uint64_t kMinFlightStagingBytes = 16u << 20, kMaxFlightStagingBytes = 64u << 20;
    static uint64_t flight_staging_bytes(uint64_t ring_bytes);

    // Memory a record needs beyond its staging buffers (code, heap, page cache of the output) when a
    // memory cgroup limit applies. Ring memory is not charged to the cgroup (measured: 2 x 64 MiB
    // rings under a 48 MiB limit); staging is, all of it (io_uring pins registered buffers).
    static constexpr uint64_t kMemoryHeadroom = 6u << 20;
    // The memory staging takes: `buffers` of `bytes`, and with -z (level > 0) each of `collectors`
    // collectors' encoded buffers, encoder scratch and zstd context.
    static uint64_t staging_memory(size_t buffers, size_t bytes, int level, size_t collectors);

    // Throws Error (exit status 2) when the options cannot work on this host. `source` must outlive
    // the plan (attrs() asks it for each event's attr).
    static RecordPlan make(const RecordOptions& opts, const RingSource& source, const HostLimits& host);
    // What the plan changed from the defaults because of this host, one line each, to be printed.
    const std::vector<std::string>& notes() const { return notes_; }

    // Data pages per ring: -m, or the default for this many rings.
    size_t ring_pages() const { return ring_pages_; }
    bool ring_pages_given() const { return ring_pages_given_; }
    // The sampling settings for rings of `pages` pages. Unless --wakeup-events or --wakeup-watermark
    // says otherwise, the collector is woken at a quarter of the ring, not the kernel's half
    // (README, "Wake-up policy"). A watermark above half the ring could never fire before the ring
    // is full: it is clamped to half, and `note` (if given) says so.
    SamplingConfig sampling(size_t pages, std::string* note = nullptr) const;
    // The source's events' attrs for rings of `pages` pages, in the source's order.
    std::vector<perf_event_attr> attrs(size_t pages, std::string* note = nullptr) const;

    // Staging: --staging-buffers, else default_staging_bytes() of the rings (fitted to a memory
    // cgroup limit).
    size_t staging_buffers() const { return staging_buffers_; }
    size_t staging_buffer_bytes() const { return staging_buffer_bytes_; }
    // The loop for all rings and as many writes in flight as staging buffers. A source whose fds stay
    // readable gets io_uring whatever the options say (level-triggered epoll would spin on them).
    const LoopConfig& loop() const { return loop_; }

private:
    RecordPlan(const RingSource& source) : source_(&source) {}
    void fit_staging(const RecordOptions& opts, const HostLimits& host, size_t rings);

    const RingSource* source_;
    SamplingConfig sampling_;
    size_t page_size_ = 4096;
    size_t ring_pages_ = 0;
    bool ring_pages_given_ = false;
    size_t staging_buffers_ = 0;
    size_t staging_buffer_bytes_ = 0;
    LoopConfig loop_;
    std::vector<std::string> notes_;
};

}  // namespace ringcap
