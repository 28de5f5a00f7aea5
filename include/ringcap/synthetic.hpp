// A synthetic ring source, for benchmarks: N rings in ordinary memory with the exact layout of a perf
// ring (perf_event_mmap_page + power-of-two data area), filled by producer threads the way the kernel
// fills perf rings. The collector polls, drains and writes them with the same code as perf rings, so
// it can be measured at ring counts and rates that 2 CPUs of real events cannot produce.
//
// Like the kernel, a producer
//   - reads data_tail (acquire) and never overwrites unread bytes: a sample that does not fit is
//     dropped and counted, and reported by a PERF_RECORD_LOST before the next sample that fits;
//   - publishes data_head with a release store after the records;
//   - wakes the ring's eventfd each time head passes the wake-up watermark. The eventfd stands for
//     the ring owner's perf fd: the collector arms its multishot poll on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <linux/perf_event.h>
#include <memory>
#include <thread>
#include <vector>

#include "ringcap/events.hpp"

namespace ringcap {

struct SyntheticConfig {
    unsigned rings = 0;            // 0 = off: record real perf events
    double mb_per_ring = 0;        // MB/s (1e6 bytes) offered to each ring; 0 = saturate (see below)
    uint32_t record_bytes = 8192;  // bytes per sample record, like a dwarf sample with an 8 KiB stack
    unsigned threads = 1;          // producer threads; each fills every threads-th ring
};
// At a set rate, samples that find their ring full are dropped and counted (the kernel's behaviour).
// With mb_per_ring = 0 a producer writes whenever there is room and never drops: the collector's
// drain rate is then the whole throughput, which is what "maximum rate" measures.

// The synthetic event: a software event whose samples carry IDENTIFIER, IP, TID, TIME, CPU, PERIOD,
// and an opaque user stack (REGS_USER with no registers + STACK_USER) that sizes them.
EventSpec synthetic_event();
perf_event_attr synthetic_attr(const SyntheticConfig& cfg, const SamplingConfig& sampling);

class SyntheticSource {
public:
    // Maps the rings (data_pages pages each) and creates their eventfds; ids are first_id, first_id+1...
    // The samples' cpu field is the ring index modulo the online CPUs, so perf's per-CPU tables fit.
    SyntheticSource(const SyntheticConfig& cfg, const perf_event_attr& attr, size_t data_pages, uint64_t first_id);
    ~SyntheticSource();  // stops the producers
    SyntheticSource(const SyntheticSource&) = delete;
    SyntheticSource& operator=(const SyntheticSource&) = delete;

    // The rings as the collector holds perf rings: one "event" per ring whose fd is the eventfd.
    // The source keeps pointers into them: it must be stopped (or destroyed) before they are unmapped.
    std::vector<CpuEvents> take_rings();

    void start();
    void stop();  // joins the producers; every record they wrote is then visible to the reader

    // After stop(): samples dropped per ring, as the kernel's per-event lost counts.
    std::vector<LostReading> lost_counts() const;
    // After stop(): samples the producers wrote or dropped, and wrote.
    uint64_t offered() const;
    uint64_t written() const;
    uint64_t dropped() const;  // also while running (a relaxed count that only grows)

private:
    struct Ring;
    void produce(unsigned thread);

    SyntheticConfig cfg_;
    uint32_t watermark_ = 0;
    std::vector<CpuEvents> pending_;
    std::vector<Ring> rings_;
    std::vector<std::thread> threads_;
    std::atomic<bool> stop_{false};
};

}  // namespace ringcap
