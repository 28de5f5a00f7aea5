#include "ringcap/collector.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <ostream>
#include <poll.h>
#include <unistd.h>

#include "ringcap/process.hpp"
#include "ringcap/records.hpp"

namespace ringcap {



Collector::Collector(const CollectorConfig& cfg, std::span<const SourceRing> rings, CollectorControl& control,
                     std::ostream& log)
    : control_(control), log_(log), tick_seconds_(cfg.tick_seconds), quiet_tick_seconds_(cfg.quiet_tick_seconds), tick_period_(cfg.tick_seconds), events_(cfg.events),
      stack_dumps_(cfg.stack_dumps), sample_freqs_(cfg.sample_freqs), period_in_ns_(cfg.period_in_ns),
      verbose_(cfg.verbose), write_fault_(cfg.write_fault) {
    if (!cfg.pressure_off) grader_.emplace(cfg.pressure);
    for (size_t e = 0; e < sample_freqs_.size(); ++e)
        period_bases_.push_back(e < period_in_ns_.size() && period_in_ns_[e] && sample_freqs_[e]
                                    ? 1'000'000'000 / sample_freqs_[e]
                                    : 0);
    applied_.zstd_level = cfg.compression_level;
    // The drain at SCHED_FIFO where allowed (the default; -r asks for it): woken, it preempts the
    // workload at once, copies and submits, and sleeps again. Without it, a negative nice. The
    // encoder thread (-z) sets its own: SCHED_OTHER at that nice, never real-time.
    if (cfg.realtime_priority) {
        if (const int err = set_realtime_priority(cfg.realtime_priority); err == 0) {
            realtime_ = cfg.realtime_priority;
        } else {
            realtime_refused_ = "sched_setscheduler(SCHED_FIFO, " + std::to_string(cfg.realtime_priority) +
                                "): " + errno_text(err) + (err == EPERM ? " (needs root or CAP_SYS_NICE)" : "");
            if (cfg.realtime_required) throw Error("-r " + std::to_string(cfg.realtime_priority) + ": " + realtime_refused_);
        }
    }
    if (!realtime_ && cfg.nice != 0) {
        if (const int err = set_thread_nice(cfg.nice); err != 0) {
            nice_refused_ = "setpriority(" + std::to_string(cfg.nice) + "): " + errno_text(err) +
                            (err == EACCES || err == EPERM ? " (a negative nice needs root or CAP_SYS_NICE, or RLIMIT_NICE)" : "");
            if (cfg.nice_required) throw Error("--collector-nice " + std::to_string(cfg.nice) + ": " + nice_refused_);
        }
    }
    nice_ = thread_nice();
    registry_ = cfg.dsos;
    sideband_inbox_ = cfg.sideband;
    if (sideband_inbox_) sideband_.reserve(1u << 20);  // handed over at least every tick: rarely outgrown
    if (registry_) hits_ = std::make_unique<SampleHits>();
    rings_.resize(rings.size());  // never resized again: the readers point at ids and events_
    for (size_t i = 0; i < rings.size(); ++i) {
        rings_[i].src = &rings[i];
        init_ring(i);
    }
    live_rings_ = rings_.size();
    staging_ = std::make_unique<StagingPool>(cfg.staging_buffer_bytes, cfg.staging_buffers);
    staging_->prefault();  // the plan budgeted all of it; faults now cost nothing captured
    if (cfg.compression_level > 0) {
        encoded_ = std::make_unique<StagingPool>(encoded_buffer_bytes(cfg.staging_buffer_bytes),
                                                 encoded_buffer_count(cfg.staging_buffers));
        encoded_->prefault();
        encoder_ = std::make_unique<EncoderThread>(cfg.compression_level, cfg.staging_buffer_bytes,
                                                  encoder_slots(cfg.staging_buffers), realtime_ ? cfg.nice : 0);
    }
    loop_ = make_loop(cfg.loop, &fallback_reason_);
}

Collector::~Collector() = default;

void Collector::init_ring(size_t i) {
    RingState& r = rings_[i];
    r.ids = IdMap();
    for (const auto& ev : r.src->events) r.ids.add(ev.id, ev.event_index);
    r.reader = RingReader(r.src->ring.view(), &r.ids, events_, registry_ ? this : nullptr, hits_.get());
    r.reader.set_stacks(stack_dumps_);
    r.reader.set_shaping(applied_.cut_bytes, applied_.drop);
    r.reader.set_period_bases(period_bases_);
    if (sideband_inbox_) r.reader.set_sideband(&sideband_);
}

void Collector::release_ring(size_t i) {
    RingState& r = rings_[i];
    if (r.released) return;
    // Everything the dead events wrote goes to the file before their ring is unmapped.
    while (!r.reader.drain(*staging_).complete && !writer_->failed()) {
        send_ready();
        loop_->run_once(*this, true);  // staging is full: let writes complete
    }
    if (!r.retired) loop_->unwatch_ring(uint32_t(i), r.watching, r.src->events[r.watching].fd.get());
    r.carried += r.reader.counters();
    const auto& d = r.reader.dropped_by_event();
    r.carried_dropped.resize(d.size(), 0);
    for (size_t e = 0; e < d.size(); ++e) r.carried_dropped[e] += d[e];
    r.reader = RingReader();
    r.released = true;
}

void Collector::adopt_ring(size_t i) {
    RingState& r = rings_[i];
    init_ring(i);
    if (r.retired) ++live_rings_;
    r.watching = 0;
    r.retired = r.final_drained = r.released = false;
    loop_->watch_ring(uint32_t(i), 0, r.src->owner_fd(), r.src->ring);
}

void Collector::attach(OutputFile& file, FileSpace& space) {
    writer_.emplace(*loop_, file, encoded_ ? *encoded_ : *staging_, space);
    if (write_fault_) writer_->set_fault(write_fault_);
}

void Collector::watch_control(Source s, int fd) { loop_->watch_source(s, fd); }

void Collector::set_timer(double seconds) { loop_->set_timer(seconds); }

void Collector::arm() {
    if (encoder_) loop_->watch_source(Source::Encoded, encoder_->wake_fd());
    for (uint32_t i = 0; i < rings_.size(); ++i) loop_->watch_ring(i, 0, rings_[i].src->owner_fd(), rings_[i].src->ring);
    loop_->set_tick(tick_seconds_);
    loop_->run_once(*this, false);  // submit the polls before anything can fire
}

void Collector::mark_heads() {
    for (auto& r : rings_)
        if (!r.released) r.mark = r.reader.head();
}

bool Collector::drained_past_marks() const {
    // Positions are free-running u64 counters: compared by their difference, which wraps.
    for (const auto& r : rings_)
        if (!r.released && !r.final_drained && int64_t(r.reader.tail() - r.mark) < 0) return false;
    return true;
}

void Collector::hand_over_dsos() {
    if (!registry_) return;
    // Mappings first: the pages of a file mapped since the last hand-over resolve at once.
    registry_->add_mappings(new_maps_);
    new_maps_.clear();
    registry_->add_hits(*hits_);
    // Exits last: a process's last pages are in, and its mappings stay a while for other collectors'.
    registry_->add_exits(new_exits_);
    new_exits_.clear();
}

uint64_t Collector::last_time() const {
    uint64_t t = 0;
    for (const auto& r : rings_) t = std::max({t, r.reader.counters().last_time, r.carried.last_time});
    return t;
}

uint64_t Collector::first_time() const {
    uint64_t t = 0;
    for (const auto& r : rings_)
        for (uint64_t v : {r.reader.counters().first_time, r.carried.first_time})
            if (v && (!t || v < t)) t = v;
    return t;
}

void Collector::hand_over_sideband() {
    if (!sideband_inbox_ || sideband_.empty()) return;
    {
        std::lock_guard lock(sideband_inbox_->mu);
        sideband_inbox_->records.insert(sideband_inbox_->records.end(), sideband_.begin(), sideband_.end());
    }
    sideband_.clear();  // keeps its capacity
}

void Collector::on_ring(uint32_t idx, uint32_t which, int revents) {
    RingState& r = rings_[idx];
    ++r.wakeups;
    if (r.retired || which != r.watching) return;
    if (revents >= 0 && !(revents & (POLLHUP | POLLERR))) return;  // data: the next pass drains it
    // This fd hung up (its task exited) or its poll failed. It is never polled again, so it cannot
    // make the loop spin (seed 000). Other events of the ring may still write into it: watch the next
    // one (a hung-up one reports POLLHUP at once and we move on). When none is left the ring is
    // retired; the next pass drains what is left in it.
    const auto& events = r.src->events;
    loop_->unwatch_ring(idx, which, events[which].fd.get());
    ++hangups_;
    if (revents < 0) log_ << "ringcap: poll on cpu " << r.src->cpu << " failed: " << errno_text(-revents) << "\n";
    if (!stopping_ && which + 1 < events.size()) {
        r.watching = which + 1;
        loop_->watch_ring(idx, r.watching, events[r.watching].fd.get(), r.src->ring);
        return;
    }
    r.retired = true;
    if (--live_rings_ == 0) waits_at_all_hung_up_ = loop_->stats().waits;
}

void Collector::on_source(Source s) {
    if (s == Source::Encoded) {
        uint64_t n;
        [[maybe_unused]] ssize_t r = ::read(encoder_->wake_fd(), &n, sizeof n);  // clear it (level-triggered epoll)
        return;  // the loop's next send_ready() takes what is done
    }
    if (s == Source::Tick) {
        tick_ = true;
        tick_work();
    } else {
        control_.on_control(s);
    }
}

double next_tick_seconds(double base, double quiet, double last_period, uint64_t drained) {
    if (quiet <= base || last_period <= 0) return base;
    return double(drained) < double(kQuietTickRate) * last_period ? quiet : base;
}

void Collector::round_requested() {
    if (quiet_tick_seconds_ <= tick_seconds_ || tick_period_ != quiet_tick_seconds_) return;
    // Rounds closer together than that (the data elsewhere calls for them) leave the tick alone.
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_tick_at_).count() < quiet_tick_seconds_ - tick_seconds_) return;
    tick_work();
    // Past the next round while quiet; at the base period at once when that ended it.
    loop_->restart_tick(tick_period_ == quiet_tick_seconds_ ? kRoundTickBackstop : tick_period_);
}

void Collector::tick_work() {
    retune_tick();
    hand_over_dsos();
    hand_over_sideband();
    control_.on_tick();
}

void Collector::retune_tick() {
    uint64_t drained = 0;
    for (const auto& r : rings_) drained += r.reader.counters().bytes + r.carried.bytes;
    // The rate over the time since the last tick (a round may have done the tick's work).
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - last_tick_at_).count();
    last_tick_at_ = now;
    const double next = next_tick_seconds(tick_seconds_, quiet_tick_seconds_, elapsed, drained - drained_at_tick_);
    drained_at_tick_ = drained;
    if (next == tick_period_) return;
    tick_period_ = next;
    loop_->set_tick(next);
}

bool Collector::pass() {
    // One drain of every ring. It starts at the ring where staging last ran out, so when the output
    // cannot keep up the rings take turns instead of the first ones always going first and the last
    // ones starving.
    bool complete = true;
    size_t cut = start_;
    const size_t n = rings_.size();
    for (size_t k = 0, i = start_; k < n; ++k, i = i + 1 == n ? 0 : i + 1) {
        RingState& r = rings_[i];
        if (r.final_drained || r.released) continue;
        // Cutting stacks and dropping samples only make room in the ring: while it is less than
        // half full it holds them whole until staging has room again (a disk that queued a burst
        // of writes, a late encoder often recover within the 65 ms half a 32 MiB ring holds at
        // 40 kHz dwarf); past half its samples are cut (all of them from the shortest cut on:
        // Grade::cut_all), past three quarters dropped.
        if (applied_.cut_bytes || applied_.drop) {
            const uint64_t fill = r.reader.head() - r.reader.tail(), cap = r.reader.capacity();
            r.reader.set_shaping(applied_.cut_all || 2 * fill > cap ? applied_.cut_bytes : 0, applied_.drop && 4 * fill > 3 * cap);
        }
        const DrainResult d = r.reader.drain(*staging_);
        if (!d.complete && complete) cut = i;
        complete &= d.complete;
        if (r.retired && d.complete) r.final_drained = true;
    }
    start_ = cut;
    return complete;
}

void Collector::flush_idle_staging() {
    // At a low sample rate a staging buffer can take minutes to fill, and a crash would lose it.
    // Once per tick, after a complete pass, send the partial buffer, padded to 4 KiB so the file
    // stays O_DIRECT-aligned.
    const bool empty = staging_->current_fill() == 0 && (!encoded_ || encoded_->current_fill() == 0);
    if (empty || writer_->in_flight() > 0) return;
    request_flush();
}

void Collector::send_ready() {
    if (encoder_) {
        // Finished frames first, in order, while the encoded buffers have room (else after writes).
        while (const auto d = encoder_->done()) {
            if (!ZstdEncoder::place(d->records, *encoded_)) break;
            samples_placed_ += d->samples;
            staging_->release(d->input);
            encoder_->pop_done();
        }
        // A flush's partial buffer goes first, then the full ones, as slots free up.
        if (pending_partial_ && encoder_->submit(*pending_partial_)) pending_partial_.reset();
        while (!pending_partial_ && staging_->has_ready() && encoder_->submit(staging_->peek_ready()))
            staging_->pop_ready();
    }
    writer_->queue_ready();
    if (flush_pending_) poll_flush();
}

void Collector::request_flush() {
    if (!encoder_) {
        staging_->pad_to_alignment();
        writer_->queue_partial();
        return;
    }
    if (flush_pending_) {
        flush_again_ = true;  // what was staged since goes with the next one
        return;
    }
    // Everything staged now: the buffers with the encoder, then the partial one and the full ones,
    // the next ones handed over (in that order: both queues are FIFO).
    flush_pending_ = true;
    pending_partial_ = staging_->take_partial();
    flush_target_ = encoder_->submitted() + staging_->ready_count() + (pending_partial_ ? 1 : 0);
    send_ready();
}

void Collector::poll_flush() {
    if (encoder_->taken() < flush_target_) return;
    flush_pending_ = false;
    encoded_->pad_to_alignment();
    writer_->queue_partial();
    if (flush_again_) {
        flush_again_ = false;
        request_flush();
    }
}

StopCause Collector::run() {
    // Each iteration is one io_uring_enter that submits the queued writes and waits; then one pass
    // drains every ring. With -z the encoder thread compresses meanwhile and wakes the loop when a
    // buffer is done.
    for (;;) {
        if (control_.stop_requested()) return StopCause::Requested;
        send_ready();
        loop_->run_once(*this, true);
        control_.before_pass();
        bool complete = pass();
        // Dropping just engaged on a pass that ran out of staging: pass again now. Dropped samples
        // need no staging, and the next wake-up may come only once a ring is full, when the kernel
        // drops whole records of every kind instead.
        if (grader_ && grade_pass() && !complete && applied_.drop) complete = pass();
        if (tick_ && complete) flush_idle_staging();
        tick_ = false;
        control_.after_pass(complete);
        if (writer_->failed()) return StopCause::WriteError;
        if (live_rings_ == 0) return StopCause::AllHungUp;
    }
}

void Collector::drain_rest() {
    stopping_ = true;  // hung-up fds are no longer replaced by the ring's next event
    while (!pass() && !writer_->failed()) {
        send_ready();
        loop_->run_once(*this, true);
    }
    hand_over_dsos();  // everything the rings held: the session finishes the file with it
    hand_over_sideband();
}

void Collector::switch_output(OutputFile& file, FileSpace& space) {
    hand_over_dsos();  // the previous file's build-ids include what it holds
    writer_->queue_partial();           // nothing, after a flush; a buffer filled since goes too
    writer_->settle_allocation(this);  // an allocation in flight belongs to the old file
    writer_->switch_to(file, space);
    for (auto& r : rings_) {
        r.reader.restart_time_range();
        r.carried.first_time = r.carried.last_time = 0;
    }
}

void Collector::flush() {
    request_flush();
    while (flush_pending_ && !writer_->failed()) {
        loop_->run_once(*this, true);  // the encoder thread's wake-up, or a write that frees a buffer
        send_ready();
    }
    writer_->wait_idle(this);
}

CollectorSnapshot Collector::snapshot() const {
    CollectorSnapshot s;
    s.rings.reserve(rings_.size());
    for (const auto& r : rings_) {
        RingSummary rs;
        rs.cpu = r.src->cpu;
        rs.ring = r.carried;
        rs.ring += r.reader.counters();
        rs.wakeups = r.wakeups;
        rs.hung_up = r.retired;
        rs.dropped_events = r.reader.dropped_by_event();
        for (size_t e = 0; e < r.carried_dropped.size() && e < rs.dropped_events.size(); ++e)
            rs.dropped_events[e] += r.carried_dropped[e];
        s.rings.push_back(std::move(rs));
        s.ring_bytes += r.src->ring.mapped_bytes();
    }
    s.events = events_;
    s.samples_placed = samples_placed_;
    s.loop = loop_->stats();
    if (writer_) s.writer = writer_->stats();
    if (encoder_) s.encoder = encoder_->stats();
    s.hangups = hangups_;
    if (live_rings_ == 0) s.waits_after_hangup = s.loop.waits - waits_at_all_hung_up_;
    s.staging_bytes = staging_->buffer_size() * staging_->count();
    s.staging_used = staging_->buffer_size() * (staging_->count() - staging_->free_count());
    if (encoded_) s.staging_bytes += encoded_->buffer_size() * encoded_->count();
    s.pressure = pressure_;
    return s;
}

}  // namespace ringcap
