#include "testkit/synthetic_source.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace ringcap {

namespace {

// Sample layout for synthetic_attr()'s sample_type, in the kernel's order:
//   header, IDENTIFIER, IP, TID (pid, tid), TIME, CPU (cpu, res), PERIOD,
//   REGS_USER (abi = NONE: no registers follow), STACK_USER (size, data[size], dyn_size)
struct SampleHead {
    perf_event_header header;
    uint64_t id, ip;
    uint32_t pid, tid;
    uint64_t time;
    uint32_t cpu, res;
    uint64_t period;
    uint64_t regs_abi;
    uint64_t stack_size;
};
static_assert(sizeof(SampleHead) == 72);
constexpr uint32_t kSampleFixed = sizeof(SampleHead) + 8;  // + dyn_size after the stack bytes

// PERF_RECORD_LOST with sample_id (sample_id_all): TID, TIME, CPU, IDENTIFIER.
struct LostRecord {
    perf_event_header header;
    uint64_t id, lost;
    uint32_t pid, tid;
    uint64_t time;
    uint32_t cpu, res;
    uint64_t sample_id;
};
static_assert(sizeof(LostRecord) == 56);

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint32_t stack_bytes(const SyntheticConfig& cfg) {
    // Whole u64s, and the record size must fit perf_event_header.size.
    const uint32_t rec = std::clamp<uint32_t>(cfg.record_bytes, kSampleFixed, 65528) & ~7u;
    return rec - kSampleFixed;
}

}  // namespace

struct SyntheticSource::Producer {
    perf_event_mmap_page* page = nullptr;
    std::byte* data = nullptr;
    uint64_t size = 0, mask = 0;
    int efd = -1;
    uint64_t id = 0;
    uint32_t cpu = 0;
    // Producer state: only its thread touches it until stop() joins.
    uint64_t head = 0;        // our copy of data_head
    uint64_t woken = 0;       // head at the last wake-up
    uint64_t written = 0;     // samples written (atomic, as dropped)
    uint64_t dropped = 0;     // samples that found the ring full (atomic: readable while running)
    uint64_t unreported = 0;  // dropped since the last PERF_RECORD_LOST

    void drop() {
        __atomic_store_n(&dropped, dropped + 1, __ATOMIC_RELAXED);  // single writer
        ++unreported;
    }
    void put(uint64_t pos, const void* src, size_t n) {
        const uint64_t off = pos & mask;
        const size_t first = std::min<size_t>(n, size - off);
        std::memcpy(data + off, src, first);
        std::memcpy(data, static_cast<const std::byte*>(src) + first, n - first);
    }
    void fill(uint64_t pos, int byte, size_t n) {
        const uint64_t off = pos & mask;
        const size_t first = std::min<size_t>(n, size - off);
        std::memset(data + off, byte, first);
        std::memset(data, byte, n - first);
    }
};

EventSpec synthetic_event() {
    EventSpec s;
    s.name = "synthetic";
    s.type = PERF_TYPE_SOFTWARE;
    s.config = PERF_COUNT_SW_CPU_CLOCK;
    return s;
}

perf_event_attr synthetic_attr(const SyntheticConfig& cfg, const SamplingConfig& sampling) {
    SamplingConfig s = sampling;
    s.call_graph = CallGraph::None;
    perf_event_attr a = make_attr(synthetic_event(), s);
    a.freq = 0;
    a.sample_period = 1;
    a.sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
    a.sample_regs_user = 0;
    a.sample_stack_user = stack_bytes(cfg);
    return a;
}

SyntheticSource::SyntheticSource(const SyntheticConfig& cfg, uint64_t first_id)
    : cfg_(cfg), first_id_(first_id), specs_{synthetic_event()} {
    if (cfg_.threads == 0) cfg_.threads = 1;
    producer_threads_ = std::min<unsigned>(cfg_.threads, cfg_.rings);
}

SyntheticSource::~SyntheticSource() { disable(); }

void SyntheticSource::open(std::vector<perf_event_attr>& attrs, size_t data_pages) {
    const perf_event_attr& attr = attrs.front();
    const uint64_t ring_bytes = uint64_t(data_pages) * page_size();
    // The kernel's rule: wake every wakeup_watermark bytes (default half the ring).
    watermark_ = attr.watermark && attr.wakeup_watermark ? attr.wakeup_watermark : uint32_t(ring_bytes / 2);
    const long online = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    std::vector<SourceRing> rings(cfg_.rings);
    std::vector<Producer> producers(cfg_.rings);
    for (unsigned i = 0; i < cfg_.rings; ++i) {
        auto rb = RingBuffer::anonymous(data_pages);
        if (!rb) throw Error("synthetic ring " + std::to_string(i) + ": mmap: " + errno_text(errno));
        UniqueFd efd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        if (!efd) throw Error("eventfd: " + errno_text(errno) + " (raise RLIMIT_NOFILE: ulimit -n)");
        Producer& p = producers[i];
        const RingView v = rb->view();
        p.page = v.page;
        p.data = v.data;
        p.size = v.size;
        p.mask = v.size - 1;
        p.efd = efd.get();
        p.id = first_id_ + i;
        p.cpu = uint32_t(i % unsigned(online));
        SourceRing& r = rings[i];
        r.cpu = int(i);
        OpenEvent ev;
        ev.fd = std::move(efd);
        ev.id = p.id;
        ev.cpu = int(i);
        r.events.push_back(std::move(ev));
        r.ring = std::move(*rb);
    }
    rings_ = std::move(rings);
    producers_ = std::move(producers);
}

void SyntheticSource::enable() {
    stop_.store(false, std::memory_order_relaxed);
    finished_threads_.store(0, std::memory_order_relaxed);
    for (unsigned t = 0; t < producer_threads_; ++t)
        threads_.emplace_back([this, t] { produce(t); });
}

void SyntheticSource::disable() {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& t : threads_) t.join();
    threads_.clear();
}

void SyntheticSource::produce(unsigned thread) {
    const uint32_t stack = stack_bytes(cfg_);
    const uint32_t rec_size = kSampleFixed + stack;
    const bool rated = cfg_.mb_per_ring > 0;
    const double samples_per_ns = rated ? cfg_.mb_per_ring * 1e6 / double(rec_size) / 1e9 : 0;
    const uint32_t pid = uint32_t(::getpid());
    std::vector<Producer*> mine;
    for (size_t i = thread; i < producers_.size(); i += cfg_.threads) mine.push_back(&producers_[i]);

    SampleHead s{};
    s.header.type = PERF_RECORD_SAMPLE;
    s.header.misc = PERF_RECORD_MISC_USER;
    s.header.size = uint16_t(rec_size);
    s.pid = pid;
    s.period = 1;
    s.regs_abi = PERF_SAMPLE_REGS_ABI_NONE;
    s.stack_size = stack;
    const uint64_t dyn_size = stack;
    std::vector<std::byte> stack_template(cfg_.varied_stacks || cfg_.random_stacks ? stack : 0);
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (auto& b : stack_template) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b = std::byte(x);
    }

    // A rated producer offers each ring's due samples once per tick. The kernel's producer is smooth;
    // ours is smooth enough if a tick's burst is at most an eighth of the ring: 1 ms, shorter for fast
    // rings (at 1 GB/s into a 512 KiB ring a 1 ms burst alone would overflow it), at least 20 us.
    uint64_t tick_ns = 1000000;
    if (rated && !mine.empty()) {
        const double ring_bytes = double(mine.front()->size);
        const double bytes_per_ns = cfg_.mb_per_ring * 1e6 / 1e9;
        tick_ns = uint64_t(std::clamp(ring_bytes / 8 / bytes_per_ns, 20000.0, 1000000.0));
        prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // the default 50 us slack would stretch short ticks
    }
    const uint64_t t0 = now_ns();
    uint64_t next_tick = t0;
    bool finished = false;
    while (!stop_.load(std::memory_order_relaxed)) {
        const uint64_t now = now_ns();
        bool wrote_any = false;
        uint64_t lowest = UINT64_MAX;
        for (const Producer* r : mine) lowest = std::min(lowest, r->written);
        if (cfg_.samples_per_ring && !finished && lowest >= cfg_.samples_per_ring) {
            finished = true;
            // RELEASE: the counts and records are written before all_offered() says so.
            finished_threads_.fetch_add(1, std::memory_order_release);
        }
        for (Producer* r : mine) {
            // Acquire pairs with the reader's release store of data_tail: the bytes it has released
            // are no longer read, so we may overwrite them (the kernel's smp_mb after reading tail).
            const uint64_t tail = __atomic_load_n(&r->page->data_tail, __ATOMIC_ACQUIRE);
            const uint64_t room_end = tail + r->size;
            // How many samples to offer in this pass.
            uint64_t want;
            if (rated) {
                const uint64_t due = uint64_t(double(now - t0) * samples_per_ns);
                want = due - (r->written + r->dropped);
            } else {
                want = (room_end - r->head) / rec_size;  // as many as fit, never drops
            }
            if (cfg_.samples_per_ring) {
                // In lock step: sample n goes to every ring before n + 1 goes to any, so the counted
                // times follow the order of production, as clock times do (FINISHED_ROUND relies on it).
                want = std::min<uint64_t>(want, r->written == lowest && r->written < cfg_.samples_per_ring ? 1 : 0);
            }
            const uint64_t head0 = r->head;
            for (uint64_t k = 0; k < want; ++k) {
                if (r->unreported) {
                    // Like the kernel: report the drops before the next record that fits.
                    if (r->head + sizeof(LostRecord) > room_end) {
                        r->drop();
                        continue;
                    }
                    LostRecord l{};
                    l.header.type = PERF_RECORD_LOST;
                    l.header.size = sizeof l;
                    l.id = r->id;
                    l.lost = r->unreported;
                    l.pid = l.tid = pid;
                    l.time = now;
                    l.cpu = r->cpu;
                    l.sample_id = r->id;
                    r->put(r->head, &l, sizeof l);
                    r->head += sizeof l;
                    r->unreported = 0;
                }
                if (r->head + rec_size > room_end) {
                    r->drop();
                    continue;
                }
                s.id = r->id;
                s.ip = 0x400000 + ((r->written & 0xff) << 4);
                s.tid = pid;
                // Counted times: unique across rings (ids are consecutive) and, in lock step, in the
                // order of production.
                s.time = cfg_.samples_per_ring ? 1000000 + (r->written * producers_.size() + (r->id - first_id_)) * 100 : now;
                s.cpu = r->cpu;
                r->put(r->head, &s, sizeof s);
                // The stack bytes are written too, as the kernel copies a real stack: the reader then
                // finds them where a real producer leaves them (recently written, by another CPU).
                if (cfg_.random_stacks) {
                    for (size_t w = 0; w + 8 <= stack; w += 8) {
                        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                        std::memcpy(stack_template.data() + w, &x, 8);
                    }
                    r->put(r->head + sizeof s, stack_template.data(), stack);
                } else if (cfg_.varied_stacks) {
                    // Only the words that vary are written per sample; the rest is the template's.
                    for (size_t w = (r->written % 16) * 8; w + 8 <= stack; w += 128) {
                        const uint64_t v = r->written * 0x9E3779B97F4A7C15ull + w;
                        std::memcpy(stack_template.data() + w, &v, 8);
                    }
                    r->put(r->head + sizeof s, stack_template.data(), stack);
                } else {
                    r->fill(r->head + sizeof s, int(r->written & 0xff), stack);
                }
                r->put(r->head + sizeof s + stack, &dyn_size, sizeof dyn_size);
                r->head += rec_size;
                __atomic_store_n(&r->written, r->written + 1, __ATOMIC_RELAXED);  // single writer
            }
            if (r->head == head0) continue;
            wrote_any = true;
            // Release: the records above are visible before the new head (the reader's acquire load).
            __atomic_store_n(&r->page->data_head, r->head, __ATOMIC_RELEASE);
            if (r->head - r->woken >= watermark_) {
                r->woken = r->head;
                const uint64_t one = 1;
                // The collector never reads the counter (poll wake-ups are all it needs); EAGAIN
                // only after 2^64-2 wake-ups.
                [[maybe_unused]] ssize_t n = ::write(r->efd, &one, sizeof one);
            }
        }
        if (rated) {
            next_tick += tick_ns;
            const uint64_t after = now_ns();
            if (next_tick < after) next_tick = after;  // behind: no sleep, catch up
            timespec ts{time_t(next_tick / 1000000000ull), long(next_tick % 1000000000ull)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
        } else if (!wrote_any) {
            // Every ring is full: let the collector run (on a 2-CPU machine a spinning producer
            // would take its CPU) rather than poll data_tail in a loop.
            timespec ts{0, 50000};
            nanosleep(&ts, nullptr);
        }
    }
}

std::vector<LostReading> SyntheticSource::lost_counts() const {
    std::vector<LostReading> out;
    for (const auto& r : producers_)
        if (r.dropped) out.push_back({r.id, int(r.cpu), 0, r.dropped});
    return out;
}

uint64_t SyntheticSource::written() const {
    uint64_t n = 0;
    for (const auto& r : producers_) n += __atomic_load_n(&r.written, __ATOMIC_RELAXED);
    return n;
}
uint64_t SyntheticSource::dropped() const {
    uint64_t n = 0;
    for (const auto& r : producers_) n += __atomic_load_n(&r.dropped, __ATOMIC_RELAXED);
    return n;
}
uint64_t SyntheticSource::offered() const { return written() + dropped(); }
}  // namespace ringcap
