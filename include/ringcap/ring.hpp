// The perf ring: a move-only owner of the mapping, and a pure reader that copies [data_tail, data_head)
// into staging buffers. The reader only needs a control page and a data area, so tests drive it over
// ordinary memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <linux/perf_event.h>
#include <optional>
#include <span>
#include <vector>

#include "ringcap/dsos.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

class StagingPool;

// The memory a reader works on: the control page plus a power-of-two data area.
struct RingView {
    perf_event_mmap_page* page = nullptr;
    std::byte* data = nullptr;
    uint64_t size = 0;  // power of two
};

// A perf ring mapped from an event fd. Only built by map(): there is no unmapped RingBuffer, so
// nothing can arm a poll on an fd that has no ring (seed 000: that poll reports POLLHUP forever).
class RingBuffer {
public:
    RingBuffer() = default;
    // mmap (1 + data_pages) pages of fd. Returns nullopt and sets errno on failure.
    static std::optional<RingBuffer> map(int fd, size_t data_pages);
    // The same layout in ordinary memory, for the synthetic source: a zeroed control page (with
    // data_offset and data_size set) and data_pages pages of data.
    static std::optional<RingBuffer> anonymous(size_t data_pages);

    RingView view() const;
    bool valid() const { return mapping_.get() != nullptr; }
    size_t mapped_bytes() const { return mapping_.size(); }

private:
    explicit RingBuffer(Mapping m) : mapping_(std::move(m)) {}
    Mapping mapping_;
};

// Maps a perf event id to the index of its event in the record; unknown ids map to npos.
// Looked up once per sample: entries stay sorted by id, so per-task rings with many threads (one
// id per thread and event) cost a binary search, and the usual handful a short scan.
class IdMap {
public:
    static constexpr size_t npos = static_cast<size_t>(-1);
    void add(uint64_t id, size_t index);
    size_t find(uint64_t id) const {
        if (entries_.size() <= 8) {
            for (const auto& e : entries_)
                if (e.id == id) return e.index;
            return npos;
        }
        auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                                   [](const Entry& e, uint64_t v) { return e.id < v; });
        return it != entries_.end() && it->id == id ? it->index : npos;
    }

private:
    struct Entry {
        uint64_t id;
        size_t index;
    };
    std::vector<Entry> entries_;  // sorted by id
};

struct EventCounters {
    uint64_t samples = 0;  // in the output (read from the ring, less those dropped)
    uint64_t lost = 0;     // sum of PERF_RECORD_LOST.lost
    uint64_t dropped = 0;  // read, then left out under back-pressure
};

struct RingCounters {
    uint64_t bytes = 0;
    uint64_t records = 0;
    uint64_t samples = 0;
    uint64_t lost_records = 0;  // PERF_RECORD_LOST records
    uint64_t lost = 0;          // samples the kernel dropped, sum of PERF_RECORD_LOST.lost
    uint64_t throttles = 0;
    uint64_t bad_headers = 0;   // records with an impossible size (must stay 0)
    uint64_t partial_drains = 0;  // drains stopped early because staging was full
    uint64_t dropped = 0;         // samples read and left out under back-pressure (not in `samples`
                                  // nor in `records`, which count what reaches the output)
    uint64_t cut = 0;             // samples whose user stack was cut short of dyn_size (back-pressure)
    uint64_t trimmed = 0;         // ring bytes not copied: stacks trimmed to dyn_size and cut
    uint64_t first_time = 0;      // earliest and latest sample time (perf's HEADER_SAMPLE_TIME); 0: none
    uint64_t last_time = 0;

    RingCounters& operator+=(const RingCounters& o) {
        if (o.first_time != 0) {
            first_time = first_time == 0 ? o.first_time : std::min(first_time, o.first_time);
            last_time = std::max(last_time, o.last_time);
        }
        bytes += o.bytes;
        records += o.records;
        samples += o.samples;
        lost_records += o.lost_records;
        lost += o.lost;
        throttles += o.throttles;
        bad_headers += o.bad_headers;
        partial_drains += o.partial_drains;
        dropped += o.dropped;
        cut += o.cut;
        trimmed += o.trimmed;
        return *this;
    }
};

// Told about every user-space executable mapping record (MMAP/MMAP2) and process exit the reader
// passes, for the BUILD_ID feature. Rare records; the callee may allocate.
class MmapObserver {
public:
    virtual ~MmapObserver() = default;
    virtual void on_exec_mapping(const MappedFile& m) = 0;
    // PERF_RECORD_EXIT of a process's main thread: its mappings are gone.
    virtual void on_process_exit(uint32_t /*pid*/) {}
};

struct DrainResult {
    uint64_t bytes = 0;
    bool complete = true;  // false if staging ran out of space before the ring was empty
};

// Copies a ring's unread bytes into a StagingPool. Pure logic, no syscalls.
class RingReader {
public:
    RingReader() = default;
    // ids/events may be null: then per-event counts are not kept. With `mmaps`, executable mappings
    // are reported to it and user-space sample addresses noted in `hits` (both for BUILD_ID).
    RingReader(RingView view, const IdMap* ids, std::span<EventCounters> events, MmapObserver* mmaps = nullptr,
               SampleHits* hits = nullptr);

    // Consumes everything up to the current data_head, or the whole records that fit in staging, and
    // releases it to the kernel. A record never straddles two staging buffers: the rest of a buffer
    // the next record does not fit in is padding.
    DrainResult drain(StagingPool& staging);

    const RingCounters& counters() const { return counters_; }
    // Samples dropped under back-pressure in this ring, per event index (LOST_SAMPLES at the end).
    const std::vector<uint64_t>& dropped_by_event() const { return dropped_by_event_; }
    // Rotation: the sample time range starts again (each file has its own HEADER_SAMPLE_TIME).
    void restart_time_range() { counters_.first_time = counters_.last_time = 0; }
    uint64_t tail() const { return tail_; }
    // Bytes of the ring's data area.
    uint64_t capacity() const { return view_.size; }
    // The flight recorder: the records that describe tasks and mappings (COMM, FORK, EXIT, MMAP,
    // MMAP2) are also appended, whole, to `log` as they are copied (sideband_state.hpp). Null: not.
    void set_sideband(std::vector<std::byte>* log) { sideband_ = log; }
    // The kernel's data_head now (ACQUIRE, as drain() loads it): rounds mark it, then wait for tail().
    uint64_t head() const { return __atomic_load_n(&view_.page->data_head, __ATOMIC_ACQUIRE); }

    // Per event index, the user-stack dump size of its samples when the dump (PERF_SAMPLE_STACK_USER)
    // is their last field, else 0. Each such sample is copied with its dump trimmed to dyn_size,
    // rounded up to 8: the bytes past dyn_size are leftovers of older records that no reader uses
    // (a third of a busy dwarf capture), and the header's size and the dump's size field are
    // rewritten (perf's and hotspot's parsers take both from each record). A dump of dyn_size 0
    // becomes an empty one (size 0, no dyn_size field, as the kernel writes it). A record whose size
    // field is not the requested one (the kernel shrank it to stay under 64 KiB) is copied whole.
    void set_stacks(std::span<const uint32_t> dump_sizes) { stacks_ = dump_sizes; }
    // Back-pressure (the collector's grade): user stacks cut to at most `cut_bytes` (0: not cut;
    // dyn_size is cut with them, so perf unwinds what is left), and with `drop`, samples that find
    // no room in staging left out, counted (RingCounters::dropped), never any other record: what
    // staging takes is copied (cut as said), the samples at the tail of the ring beyond go.
    void set_shaping(uint32_t cut_bytes, bool drop) {
        cut_ = cut_bytes & ~7u;
        drop_ = drop;
    }
    // Back-pressure's lower frequency for the hrtimer events (cpu-clock, task-clock), whose samples
    // keep reporting the period they were opened with (the kernel does not update it when
    // PERF_EVENT_IOC_PERIOD changes theirs): per event index, that period in ns (0: the event
    // reports its own). change_period(): from ring position `from` on, they sample every
    // base << shift ns, and their samples' PERIOD field says so.
    void set_period_bases(std::span<const uint64_t> base_ns) { period_bases_ = base_ns; }
    void change_period(uint64_t from, unsigned shift);

private:
    void copy_out(uint64_t from, std::byte* dst, uint64_t len) const;
    // Copies the whole records in [from, from + len) to dst, shaped as set_stacks(), set_shaping()
    // and change_period() say; returns the bytes written (at most len).
    uint64_t copy_shaped(uint64_t from, std::byte* dst, uint64_t len);
    uint64_t account(uint64_t start, uint64_t limit, uint64_t head);
    // Back-pressure's drops: the event index of the sample at `pos`, a sample that becomes a
    // dropped one, and the samples from `pos` to the first record of another kind (or head) dropped
    // without staging; returns where they end.
    size_t event_of(uint64_t pos, const perf_event_header& h) const;
    void count_dropped(const perf_event_header& h, size_t ev);
    uint64_t drop_leading_samples(uint64_t pos, uint64_t head);

    RingView view_;
    uint64_t mask_ = 0;
    uint64_t tail_ = 0;       // our copy of data_tail; we are its only writer
    std::vector<std::byte>* sideband_ = nullptr;
    void note_mapping(uint64_t pos, const perf_event_header& hdr);

    const IdMap* ids_ = nullptr;
    std::span<EventCounters> events_;
    MmapObserver* mmaps_ = nullptr;
    SampleHits* hits_ = nullptr;
    std::span<const uint32_t> stacks_;
    uint32_t cut_ = 0;
    bool drop_ = false;
    std::span<const uint64_t> period_bases_;
    struct PeriodChange {
        uint64_t from;  // ring position
        unsigned shift;
    };
    std::vector<PeriodChange> period_changes_;  // oldest first; the first one is in effect
    unsigned shift_at(uint64_t pos);            // the shift in effect at ring position `pos`
    RingCounters counters_;
    std::vector<uint64_t> dropped_by_event_;
};

}  // namespace ringcap
