// Test kit (tests and bench only, not in the product): a synthetic ring source. N rings in ordinary
// memory with the exact layout of a perf ring (perf_event_mmap_page + power-of-two data area), filled
// by producer threads the way the kernel fills perf rings. A record drains them through the same
// RingSource seam, loop, reader, staging, writer and format code as perf rings, so the collector can
// be measured at ring counts and rates that 2 CPUs of real events cannot produce.
//
// Like the kernel, a producer
//   - reads data_tail (acquire) and never overwrites unread bytes: a sample that does not fit is
//     dropped and counted, and reported by a PERF_RECORD_LOST before the next sample that fits;
//   - publishes data_head with a release store after the records;
//   - wakes the ring's eventfd each time head passes the wake-up watermark. The eventfd stands for
//     the ring owner's perf fd: the collector arms its multishot poll on it.
#pragma once

#include <atomic>
#include <string>
#include <cstdint>
#include <linux/perf_event.h>
#include <memory>
#include <thread>
#include <vector>

#include "ringcap/source.hpp"

namespace ringcap {

struct SyntheticConfig {
    unsigned rings = 1;
    double mb_per_ring = 0;        // MB/s (1e6 bytes) offered to each ring; 0 = saturate (see below)
    uint32_t record_bytes = 8192;  // bytes per sample record, like a dwarf sample with an 8 KiB stack
    unsigned threads = 1;          // producer threads; each fills every threads-th ring
    // Reproducible records: each ring offers this many samples, the rings in lock step (one producer
    // thread), and then stops, with times counted per sample instead of read from the clock (two
    // records of the same config hold the same samples). 0 = no limit, clock times.
    uint64_t samples_per_ring = 0;
    // Stacks as varied copies of a random template (one word in 16 changes from sample to sample)
    // instead of one repeated byte: data that compresses like real stacks, not at memory speed.
    bool varied_stacks = false;
    // Stacks of fresh random bytes in every sample: what zstd cannot shrink (-z frames of many records).
    bool random_stacks = false;
};
// At a set rate, samples that find their ring full are dropped and counted (the kernel's behaviour).
// With mb_per_ring = 0 a producer writes whenever there is room and never drops: the collector's
// drain rate is then the whole throughput, which is what "maximum rate" measures.

// The synthetic event: a software event whose samples carry IDENTIFIER, IP, TID, TIME, CPU, PERIOD,
// and an opaque user stack (REGS_USER with no registers + STACK_USER) that sizes them.
EventSpec synthetic_event();
perf_event_attr synthetic_attr(const SyntheticConfig& cfg, const SamplingConfig& sampling);

class SyntheticSource final : public RingSource {
public:
    // Ids are first_id, first_id+1, ... The samples' cpu field is the ring index modulo the online
    // CPUs, so perf's per-CPU tables fit.
    explicit SyntheticSource(const SyntheticConfig& cfg, uint64_t first_id = 1);
    ~SyntheticSource() override;  // stops the producers before the rings are unmapped
    SyntheticSource(const SyntheticSource&) = delete;
    SyntheticSource& operator=(const SyntheticSource&) = delete;

    const std::vector<EventSpec>& specs() const override { return specs_; }
    std::string describe() const override { return "synthetic rings"; }
    perf_event_attr attr(const EventSpec&, const SamplingConfig& sampling) const override {
        return synthetic_attr(cfg_, sampling);
    }
    size_t ring_count() const override { return cfg_.rings; }
    size_t fd_count() const override { return cfg_.rings; }
    bool level_triggered_ok() const override { return false; }  // an eventfd stays readable
    // Maps the rings (data_pages pages each) and creates their eventfds; the watermark is attrs[0]'s.
    void open(std::vector<perf_event_attr>& attrs, size_t data_pages) override;
    std::span<SourceRing> rings() override { return rings_; }
    void enable() override;   // starts the producers
    void disable() override;  // joins them: every record they wrote is then visible to the reader
    // After disable(): samples dropped per ring, as the kernel's per-event lost counts.
    std::vector<LostReading> lost_counts() const override;

    // After disable(): samples the producers wrote or dropped, and wrote.
    uint64_t offered() const;
    uint64_t written() const;
    uint64_t dropped() const;  // also while running (a relaxed count that only grows)
    // With samples_per_ring: every producer has offered all its samples (also while running; a
    // test stops its record then instead of guessing a duration).
    bool all_offered() const {
        return producer_threads_ > 0 && finished_threads_.load(std::memory_order_acquire) == producer_threads_;
    }

private:
    struct Producer;
    void produce(unsigned thread);

    SyntheticConfig cfg_;
    uint64_t first_id_;
    std::vector<EventSpec> specs_;
    uint32_t watermark_ = 0;
    std::vector<SourceRing> rings_;
    std::vector<Producer> producers_;  // one per ring
    std::vector<std::thread> threads_;
    std::atomic<bool> stop_{false};
    unsigned producer_threads_ = 0;  // set at construction: all_offered() reads it from any thread
    std::atomic<unsigned> finished_threads_{0};
};

}  // namespace ringcap
