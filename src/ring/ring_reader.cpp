#include <algorithm>
#include <cassert>
#include <cstring>
#include <sys/mman.h>

#include "ringcap/records.hpp"
#include "ringcap/ring.hpp"
#include "ringcap/staging.hpp"

namespace ringcap {

void IdMap::add(uint64_t id, size_t index) {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                               [](const Entry& e, uint64_t v) { return e.id < v; });
    entries_.insert(it, {id, index});
}

RingReader::RingReader(RingView view, const IdMap* ids, std::span<EventCounters> events, MmapObserver* mmaps,
                       SampleHits* hits)
    : view_(view), mask_(view.size - 1), ids_(ids), events_(events), mmaps_(mmaps), hits_(hits),
      dropped_by_event_(events.size(), 0) {
    assert(view.size != 0 && (view.size & (view.size - 1)) == 0);
    // We are the only writer of data_tail; start where a previous reader (if any) left off.
    tail_ = __atomic_load_n(&view_.page->data_tail, __ATOMIC_RELAXED);
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

uint64_t RingReader::account(uint64_t start, uint64_t limit, uint64_t head) {
    // Walks the records that lie wholly in [start, limit) and returns where the last one ends.
    // data_head only moves past whole records, so every record that starts below head is complete.
    // Positions are compared relative to start, so the free-running u64 counters may wrap.
    const uint64_t span = limit - start, avail = head - start;
    uint64_t rel = 0;
    while (rel < span) {
        const uint64_t pos = start + rel;
        auto hdr = load_at<perf_event_header>(view_.data, mask_, pos);
        if (hdr.size < sizeof(perf_event_header) || hdr.size % 8 != 0 || rel + hdr.size > avail) {
            // Impossible with a sane kernel (a record below head runs past it, or has no size). Keep
            // the bytes (the file shows the damage) and resync at the limit rather than wait forever.
            ++counters_.bad_headers;
            return limit;
        }
        if (rel + hdr.size > span) break;  // does not fit in this buffer
        ++counters_.records;
        if (sideband_ && (hdr.type == PERF_RECORD_COMM || hdr.type == PERF_RECORD_FORK || hdr.type == PERF_RECORD_EXIT ||
                          hdr.type == PERF_RECORD_MMAP || hdr.type == PERF_RECORD_MMAP2)) {
            const size_t at = sideband_->size();
            sideband_->resize(at + hdr.size);  // the collector reserves room: no allocation while it suffices
            copy_out(pos, sideband_->data() + at, hdr.size);
        }
        switch (hdr.type) {
            case PERF_RECORD_SAMPLE: {
                if (hdr.size >= field::kSampleTime + 8) {
                    const uint64_t t = load_at<uint64_t>(view_.data, mask_, pos + field::kSampleTime);
                    counters_.first_time = counters_.first_time == 0 ? t : std::min(counters_.first_time, t);
                    counters_.last_time = std::max(counters_.last_time, t);
                }
                ++counters_.samples;
                // perf's rule for BUILD_ID: the files that user-space sample addresses fall in.
                if (hits_ && (hdr.misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_USER &&
                    hdr.size >= field::kSamplePid + 8)
                    hits_->add(load_at<uint32_t>(view_.data, mask_, pos + field::kSamplePid),
                               load_at<uint64_t>(view_.data, mask_, pos + field::kSampleIp));
                if (ids_ && hdr.size >= field::kSampleIdentifier + 8) {
                    size_t ev = ids_->find(load_at<uint64_t>(view_.data, mask_, pos + field::kSampleIdentifier));
                    if (ev < events_.size()) ++events_[ev].samples;
                }
                break;
            }
            case PERF_RECORD_LOST: {
                ++counters_.lost_records;
                if (hdr.size >= field::kBody + sizeof(LostBody)) {
                    uint64_t lost = load_at<uint64_t>(view_.data, mask_, pos + field::kLostCount);
                    counters_.lost += lost;
                    if (ids_) {
                        size_t ev = ids_->find(load_at<uint64_t>(view_.data, mask_, pos + field::kLostId));
                        if (ev < events_.size()) events_[ev].lost += lost;
                    }
                }
                break;
            }
            case PERF_RECORD_THROTTLE:
                ++counters_.throttles;
                break;
            case PERF_RECORD_MMAP:
            case PERF_RECORD_MMAP2:
                if (mmaps_) note_mapping(pos, hdr);
                break;
            case PERF_RECORD_EXIT:
                if (mmaps_ && hdr.size >= field::kBody + sizeof(ForkBody)) {
                    ForkBody b;
                    copy_out(pos + field::kBody, reinterpret_cast<std::byte*>(&b), sizeof b);  // may wrap
                    if (b.pid == b.tid) mmaps_->on_process_exit(b.pid);
                }
                break;
            default:
                break;
        }
        rel += hdr.size;
    }
    return start + rel;
}

void RingReader::note_mapping(uint64_t pos, const perf_event_header& hdr) {
    const bool v2 = hdr.type == PERF_RECORD_MMAP2;
    const uint64_t name_at = v2 ? field::kMmap2Filename : field::kMmapFilename;
    if (hdr.misc & PERF_RECORD_MISC_MMAP_DATA) return;
    if ((hdr.misc & PERF_RECORD_MISC_CPUMODE_MASK) != PERF_RECORD_MISC_USER) return;  // the kernel's own
    if (hdr.size <= name_at) return;
    MappedFile m;
    if (v2) {
        Mmap2Body b;
        copy_out(pos + field::kBody, reinterpret_cast<std::byte*>(&b), sizeof b);
        if (!(b.prot & PROT_EXEC)) return;
        m = {b.pid, b.addr, b.addr + b.len, b.maj, b.min, b.ino, !(hdr.misc & PERF_RECORD_MISC_MMAP_BUILD_ID), {}};
    } else {
        MmapBody b;
        copy_out(pos + field::kBody, reinterpret_cast<std::byte*>(&b), sizeof b);
        m.pid = b.pid;
        m.start = b.addr;
        m.end = b.addr + b.len;
    }
    char name[4096];
    const uint64_t n = std::min<uint64_t>(hdr.size - name_at, sizeof name - 1);
    copy_out(pos + name_at, reinterpret_cast<std::byte*>(name), n);
    name[n] = 0;
    m.path = name;
    mmaps_->on_exec_mapping(m);
}

void RingReader::change_period(uint64_t from, unsigned shift) {
    if (period_changes_.empty() && shift == 0) return;  // the kernel's own period is right
    period_changes_.push_back({from, shift});
}

unsigned RingReader::shift_at(uint64_t pos) {
    // Changes are rare (a few a second at most) and passed in order: drop the ones superseded.
    while (period_changes_.size() > 1 && int64_t(pos - period_changes_[1].from) >= 0)
        period_changes_.erase(period_changes_.begin());
    if (period_changes_.empty() || int64_t(pos - period_changes_.front().from) < 0) return 0;
    if (period_changes_.size() == 1 && period_changes_.front().shift == 0) {
        period_changes_.clear();  // back to the kernel's period for good
        return 0;
    }
    return period_changes_.front().shift;
}

size_t RingReader::event_of(uint64_t pos, const perf_event_header& h) const {
    return ids_ && h.size >= field::kSampleIdentifier + 8
               ? ids_->find(load_at<uint64_t>(view_.data, mask_, pos + field::kSampleIdentifier))
               : IdMap::npos;
}

void RingReader::count_dropped(const perf_event_header& h, size_t ev) {
    // account() counted it as a sample: it becomes a dropped one.
    --counters_.samples;  // samples and records count what reaches the output
    --counters_.records;
    ++counters_.dropped;
    counters_.trimmed += h.size;
    if (ev < events_.size()) --events_[ev].samples, ++events_[ev].dropped, ++dropped_by_event_[ev];
}

uint64_t RingReader::drop_leading_samples(uint64_t pos, uint64_t head) {
    uint64_t end = pos;
    while (end != head) {
        const auto h = load_at<perf_event_header>(view_.data, mask_, end);
        if (h.type != PERF_RECORD_SAMPLE || h.size < sizeof h || h.size % 8 != 0 || h.size > head - end) break;
        end += h.size;
    }
    if (end == pos) return pos;
    account(pos, end, head);
    for (uint64_t at = pos; at != end;) {
        const auto h = load_at<perf_event_header>(view_.data, mask_, at);
        count_dropped(h, event_of(at, h));
        at += h.size;
    }
    return end;
}

uint64_t RingReader::copy_shaped(uint64_t from, std::byte* dst, uint64_t len) {
    // Whole records in [from, from + len): runs of records kept as they are go in one copy; a
    // sample whose stack is trimmed or cut is copied in parts with its fields rewritten (dropped
    // samples never get here: drop_leading_samples). A sample ends {u64 size; char data[size]; u64 dyn_size}. Positions and
    // fields are 8-byte aligned (never split by the wrap).
    uint64_t done = 0, out = 0;  // [from, from + done) is handled; dst has `out` bytes
    auto flush_run = [&](uint64_t upto) {
        copy_out(from + done, dst + out, upto - done);
        out += upto - done;
        done = upto;
    };
    for (uint64_t at = 0; at + sizeof(perf_event_header) <= len;) {
        const auto h = load_at<perf_event_header>(view_.data, mask_, from + at);
        // An impossible header (account() counted it): the rest is copied as it is.
        if (h.size < sizeof h || h.size % 8 != 0 || at + h.size > len) break;
        const uint64_t end = at + h.size;
        if (h.type != PERF_RECORD_SAMPLE) {
            at = end;
            continue;
        }
        const size_t ev = event_of(from + at, h);
        // The period a lowered frequency gives, in the sample's PERIOD field (after its copy).
        uint64_t period = 0;
        if (!period_changes_.empty() && ev < period_bases_.size() && period_bases_[ev] &&
            h.size >= field::kSamplePeriod + 8)
            if (const unsigned shift = shift_at(from + at)) period = period_bases_[ev] << shift;
        const uint64_t rec_start = out + (at - done);  // where this record starts in dst, once copied
        auto patch_period = [&] {
            if (period) std::memcpy(dst + rec_start + field::kSamplePeriod, &period, 8);
        };
        const uint64_t dump = ev < stacks_.size() ? stacks_[ev] : 0;
        if (dump == 0 || dump % 8 != 0 || h.size < field::kSampleIdentifier + 8 + dump + 16) {
            if (period) flush_run(end), patch_period();
            at = end;
            continue;
        }
        const uint64_t size_at = end - 16 - dump;
        const uint64_t size = load_at<uint64_t>(view_.data, mask_, from + size_at);
        const uint64_t dyn = load_at<uint64_t>(view_.data, mask_, from + end - 8);
        if (size != dump || dyn > dump) {  // shrunk by the kernel, or not a dump: as it is
            if (period) flush_run(end), patch_period();
            at = end;
            continue;
        }
        const uint64_t used = (dyn + 7) & ~uint64_t(7);
        const uint64_t keep = cut_ && cut_ < used ? cut_ : used;  // stack bytes kept
        const uint64_t keep_dyn = std::min(dyn, keep);
        if (keep == dump) {  // the whole dump is in use and nothing is cut
            if (period) flush_run(end), patch_period();
            at = end;
            continue;
        }
        // Up to the size field as it is, then the new size, the kept bytes, the new dyn_size.
        flush_run(size_at);
        const uint64_t rec_out = out - (size_at - at);  // where this record starts in dst
        std::memcpy(dst + out, &keep, 8);
        out += 8;
        if (keep > 0) {
            copy_out(from + size_at + 8, dst + out, keep_dyn);
            std::memset(dst + out + keep_dyn, 0, keep - keep_dyn);  // up to 7 bytes: zeroed, they mean nothing
            out += keep;
            std::memcpy(dst + out, &keep_dyn, 8);
            out += 8;
        }
        // An empty dump has no dyn_size field (the kernel writes it so; perf reads it so).
        const uint64_t new_size = out - rec_out;
        perf_event_header nh = h;
        nh.size = uint16_t(new_size);
        std::memcpy(dst + rec_out, &nh, sizeof nh);
        if (period) std::memcpy(dst + rec_out + field::kSamplePeriod, &period, 8);
        counters_.trimmed += h.size - new_size;
        if (keep < used) ++counters_.cut;
        done = end;
        at = end;
    }
    flush_run(len);
    return out;
}

DrainResult RingReader::drain(StagingPool& staging) {
    // ACQUIRE pairs with the kernel's smp_wmb() before it publishes data_head: every record byte
    // below head is visible to the loads that follow.
    const uint64_t head = __atomic_load_n(&view_.page->data_head, __ATOMIC_ACQUIRE);
    assert(head - tail_ <= view_.size);
    uint64_t pos = tail_;
    bool complete = true;
    while (pos != head) {
        // Whole records only, buffer by buffer: when staging runs out the next ring's bytes never
        // follow half a record, and every buffer can go to the file on its own.
        const auto space = staging.writable();
        if (space.empty()) {
            // Samples that are dropped need no staging: those at the tail go now, and the ring keeps
            // its room for the records that must not be lost (a record of another kind waits for
            // staging; the kernel, when the ring is full, drops whole records of every kind).
            if (drop_) {
                if (const uint64_t e = drop_leading_samples(pos, head); e != pos) {
                    pos = e;
                    continue;
                }
            }
            complete = false;
            break;
        }
        const uint64_t samples_before = counters_.samples;
        const uint64_t end = account(pos, pos + std::min<uint64_t>(head - pos, space.size()), head);
        const auto samples = uint32_t(counters_.samples - samples_before);
        if (end == pos) {
            // The next record does not fit in what is left of this buffer (an empty buffer holds any
            // record: buffers are at least kMinBufferBytes).
            if (staging.current_fill() == 0) break;
            staging.pad_current();
            continue;
        }
        if (stacks_.empty() && period_changes_.empty()) {
            copy_out(pos, space.data(), end - pos);
            staging.commit(end - pos, samples);
        } else if (const uint64_t out = copy_shaped(pos, space.data(), end - pos); out > 0) {
            staging.commit(out, samples);
        }
        pos = end;
    }
    const uint64_t len = pos - tail_;
    if (len > 0) {
        // RELEASE orders all our reads of [tail, pos) (header walk and copies) before the kernel can
        // see the space as free and overwrite it.
        __atomic_store_n(&view_.page->data_tail, pos, __ATOMIC_RELEASE);
        tail_ = pos;
        counters_.bytes += len;
    }
    if (!complete) ++counters_.partial_drains;
    return {len, complete};
}

}  // namespace ringcap
