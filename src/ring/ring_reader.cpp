#include <algorithm>
#include <cassert>
#include <cstring>

#include "ringcap/ring.hpp"
#include "ringcap/staging.hpp"

namespace ringcap {

void IdMap::add(uint64_t id, size_t index) { entries_.push_back({id, index}); }

RingReader::RingReader(RingView view, const IdMap* ids, std::span<EventCounters> events)
    : view_(view), mask_(view.size - 1), ids_(ids), events_(events) {
    assert(view.size != 0 && (view.size & (view.size - 1)) == 0);
    // We are the only writer of data_tail; start where a previous reader (if any) left off.
    tail_ = __atomic_load_n(&view_.page->data_tail, __ATOMIC_RELAXED);
    parse_pos_ = tail_;
}

void RingReader::copy_out(uint64_t from, std::byte* dst, uint64_t len) const {
    // The data area is a power of two: a range wraps at most once, so at most two copies.
    uint64_t off = from & mask_;
    uint64_t first = std::min(len, view_.size - off);
    std::memcpy(dst, view_.data + off, first);
    if (first < len) std::memcpy(dst + first, view_.data, len - first);
}

template <typename T>
static T load_at(const std::byte* data, uint64_t mask, uint64_t pos) {
    // Headers and u64 fields are 8-byte aligned and the area size is a multiple of 8: never split.
    T v;
    std::memcpy(&v, data + (pos & mask), sizeof v);
    return v;
}

void RingReader::account(uint64_t end) {
    // Walks record headers that start before `end`. Every record that starts before `end` lies
    // entirely before data_head (the kernel moves data_head past whole records only).
    while (parse_pos_ < end) {
        auto hdr = load_at<perf_event_header>(view_.data, mask_, parse_pos_);
        if (hdr.size < sizeof(perf_event_header) || hdr.size % 8 != 0) {
            // Cannot happen with a sane kernel; resynchronise at the copied end rather than loop.
            ++counters_.bad_headers;
            parse_pos_ = end;
            break;
        }
        ++counters_.records;
        switch (hdr.type) {
            case PERF_RECORD_SAMPLE: {
                ++counters_.samples;
                // PERF_SAMPLE_IDENTIFIER puts the id first in every sample.
                if (ids_ && hdr.size >= 16) {
                    size_t ev = ids_->find(load_at<uint64_t>(view_.data, mask_, parse_pos_ + 8));
                    if (ev < events_.size()) ++events_[ev].samples;
                }
                break;
            }
            case PERF_RECORD_LOST: {
                // { header; u64 id; u64 lost; sample_id }
                ++counters_.lost_records;
                if (hdr.size >= 24) {
                    uint64_t lost = load_at<uint64_t>(view_.data, mask_, parse_pos_ + 16);
                    counters_.lost += lost;
                    if (ids_) {
                        size_t ev = ids_->find(load_at<uint64_t>(view_.data, mask_, parse_pos_ + 8));
                        if (ev < events_.size()) events_[ev].lost += lost;
                    }
                }
                break;
            }
            case PERF_RECORD_THROTTLE:
                ++counters_.throttles;
                break;
            default:
                break;
        }
        parse_pos_ += hdr.size;
    }
}

DrainResult RingReader::drain(StagingPool& staging) {
    // ACQUIRE pairs with the kernel's smp_wmb() before it publishes data_head: every record byte
    // below head is visible to the loads that follow.
    const uint64_t head = __atomic_load_n(&view_.page->data_head, __ATOMIC_ACQUIRE);
    const uint64_t avail = head - tail_;
    assert(avail <= view_.size);

    uint64_t copied = 0;
    while (copied < avail) {
        auto space = staging.writable();
        if (space.empty()) break;
        uint64_t n = std::min<uint64_t>(avail - copied, space.size());
        copy_out(tail_ + copied, space.data(), n);
        staging.commit(n);
        copied += n;
    }
    if (copied == 0) return {0, avail == 0};

    const uint64_t new_tail = tail_ + copied;
    account(new_tail);  // reads ring memory: must happen before the tail is released
    // RELEASE orders all our reads of [tail, new_tail) (copies and header walks) before the kernel
    // can see the space as free and overwrite it.
    __atomic_store_n(&view_.page->data_tail, new_tail, __ATOMIC_RELEASE);
    tail_ = new_tail;
    counters_.bytes += copied;
    const bool complete = copied == avail;
    if (!complete) ++counters_.partial_drains;
    return {copied, complete};
}

}  // namespace ringcap
