// The record session's end: stop (disable the events, drain the collectors, LOST_SAMPLES), finish
// the file (features, build-ids, the final header), and the counters every report reads.
#include "session.hpp"

#include <algorithm>
#include <cstring>
#include <iomanip>

#include "ringcap/build_id_cache.hpp"
#include "ringcap/records.hpp"

namespace ringcap {

namespace {

// Adds a collector's counters to a record snapshot.
void add(RecordSnapshot& s, const CollectorSnapshot& c) {
    for (const auto& r : c.rings) {
        s.cpus.push_back(r);
        s.total += r.ring;
    }
    s.cqes += c.loop.ring_events;
    s.rearms += c.loop.rearms;
    s.waits += c.loop.waits;
    s.waits_after_hangup = std::max(s.waits_after_hangup, c.waits_after_hangup);
    s.writes += c.writer.writes;
    s.preallocations += c.writer.preallocations;
    s.writes_beyond_allocation += c.writer.beyond_allocation;
    s.bytes_written += c.writer.bytes;
    s.refused_bytes += c.writer.refused_bytes;
    s.refused_samples += c.writer.refused_samples;
    s.refused_compressed += c.writer.refused_compressed;
    s.hangups += c.hangups;
    s.ring_bytes += c.ring_bytes;
    s.staging_bytes += c.staging_bytes;
    s.staging_used += c.staging_used;
    s.compress_input += c.encoder.bytes_in;
    s.compressed_bytes += c.encoder.bytes_out;
    s.compressed_records += c.encoder.records;
    s.compressed_chunked += c.encoder.chunked;
    s.compress_cpu_seconds += double(c.encoder.cpu_ns) / 1e9;
    PressureStats& p = s.pressure;
    const PressureStats& q = c.pressure;
    p.faster_zstd += q.faster_zstd;
    p.shorter_stacks += q.shorter_stacks;
    p.slowed += q.slowed;
    p.drops += q.drops;
    p.period_errors += q.period_errors;
    if (q.fastest_zstd && (!p.fastest_zstd || q.fastest_zstd < p.fastest_zstd)) p.fastest_zstd = q.fastest_zstd;
    if (q.shortest_cut && (!p.shortest_cut || q.shortest_cut < p.shortest_cut)) p.shortest_cut = q.shortest_cut;
    p.worst_rate_shift = std::max(p.worst_rate_shift, q.worst_rate_shift);
    p.headroom = std::min(p.headroom, q.headroom);
}

}  // namespace

void Session::stop() {
    clear_status();
    const auto stop_start = Clock::now();
    seconds_ = std::chrono::duration<double>(stop_start - t0_).count();
    // Commands that came while the record was ending (the deadline or a signal came first) are
    // answered too: a snapshot asked for is dumped before the end's dump, and whoever waits on the
    // ACK FIFO is not left waiting for an answer that would never come.
    if (control_.fd() >= 0) serve_control();
    for (auto& c : collectors_) c->request_stop();
    source_->disable();  // afterwards every record is in the rings
    if (opts_.verbose)
        log_ << "ringcap: events disabled in " << std::fixed << std::setprecision(1)
             << std::chrono::duration<double, std::milli>(Clock::now() - stop_start).count() << " ms\n";
    for (auto& c : collectors_) c->drain();
    // A switch under way: the collectors that moved wrote into the next file, the others into the
    // current one. Both are kept (the next one with the records of what runs, as after any switch).
    if (next_output_) rotate();
    std::vector<std::byte> lost;
    for (const auto& l : source_->lost_counts()) {
        // Samples the source dropped for this event; perf record writes them the same way.
        const auto rec = make_lost_samples(l.id, l.cpu, l.lost);
        const auto* b = reinterpret_cast<const std::byte*>(&rec);
        lost.insert(lost.end(), b, b + sizeof rec);
        lost_samples_ += l.lost;
        event_lost_samples_[l.event_index] += l.lost;
    }
    lost_read_ = true;
    // Samples ringcap left out under back-pressure, as perf counts lost ones: perf report --stats
    // shows them with the kernel's (the summary and the JSON keep them apart).
    const auto rings = source_->rings();
    for (const auto& c : collectors_) {
        const CollectorSnapshot snap = c->snapshot();  // exact: drained
        for (size_t i = 0; i < snap.rings.size(); ++i) {
            const auto& dropped = snap.rings[i].dropped_events;
            const SourceRing& ring = rings[c->first_ring() + i];
            for (size_t e = 0; e < dropped.size(); ++e) {
                if (dropped[e] == 0) continue;
                const auto ev = std::find_if(ring.events.begin(), ring.events.end(),
                                             [e](const OpenEvent& o) { return o.event_index == e; });
                if (ev == ring.events.end()) continue;
                const auto rec = make_lost_samples(ev->id, ring.cpu, dropped[e]);
                const auto* b = reinterpret_cast<const std::byte*>(&rec);
                lost.insert(lost.end(), b, b + sizeof rec);
            }
        }
    }
    bool failed = write_error_ != 0;
    for (const auto& c : collectors_) failed |= c->write_error() != 0;
    if (!failed) write_own(lost, /*pad=*/false);
}

uint64_t Session::durable_end() const {
    // The reservations first, then what each writer owes (published before it reserves): whatever
    // lies below both is written, and every buffer ends at a record boundary.
    uint64_t end = space_->end();
    for (const auto& c : collectors_) end = std::min(end, c->owed());
    return end;
}

void Session::finish() {
    if (flight()) {
        finish_window();  // nothing is on disk but the dumps
        return;
    }
    // Rotation: the previous file first (drained: its writes all completed).
    if (prev_output_) finish_previous();
    // Everything if all writes succeeded; after a failure, the last whole record that reached the
    // disk before it (a full disk keeps all that fit).
    const uint64_t data_offset = output_->data_offset();
    uint64_t data_size = durable_end() - data_offset;
    uint64_t kept_end = UINT64_MAX;
    int error = write_error_;
    for (const auto& c : collectors_) {
        if (!c->write_error()) continue;
        kept_end = std::min(kept_end, c->kept_end());
        if (!error) error = c->write_error();
    }
    if (kept_end != UINT64_MAX) data_size = output_->last_record_end(data_size, kept_end - data_offset);
    const RecordSnapshot snap = snapshot();
    const CompressionFeature comp = compression_feature(&snap);
    // perf report --time with percentages and perf script --time need the first and last sample time
    // (with rotation, of this file: the range starts again at each switch).
    const SampleTimeRange times{snap.total.first_time, snap.total.last_time};
    const std::vector<BuildIdEntry> build_ids = opts_.build_ids ? build_id_list() : std::vector<BuildIdEntry>{};
    const std::string feature_error = output_->finish(data_size, host_info(), specs_,
                                                      opts_.build_ids ? &build_ids : nullptr,
                                                      opts_.compression_level > 0 ? &comp : nullptr,
                                                      snap.total.first_time ? &times : nullptr);
    file_bytes_ += data_size;
    const std::string path = output_->file().path();
    if (error) error_ = "writing '" + path + "' failed: " + errno_text(error) + write_error_hint(error);
    if (error)
        log_ << "ringcap: ERROR: writing '" << path << "' failed: " << errno_text(error) << write_error_hint(error)
             << "; capture stopped and kept " << data_size << " bytes of data ("
             << space_->end() - data_offset - data_size
             << " bytes not written); the file is valid up to there. The counts below are of what was read from "
                "the rings; not all of it reached the file\n";
    if (error) unwritten_bytes_ += space_->end() - data_offset - data_size;
    // A pipe whose reader went away took less.
    const uint64_t kept = output_->data_kept(file_bytes_);
    unwritten_bytes_ += file_bytes_ - kept;
    file_bytes_ = kept;
    if (error_.empty()) error_ = output_->error();
    if (!feature_error.empty()) log_ << "ringcap: the header features were not written (" << feature_error << ")\n";
    if (rotating()) {
        // As perf: the last file is named like the others.
        uint64_t samples = snap.total.samples;
        for (size_t i = 0; i < samples_at_switch_.size(); ++i) samples -= samples_at_switch_[i];
        name_finished(output_->file(), data_size, samples);
    }
    if (opts_.build_id_cache && !build_ids.empty()) cache_build_ids(build_ids);
}

RecordSnapshot Session::snapshot() const {
    RecordSnapshot s;
    s.seconds = seconds_ >= 0 ? seconds_ : std::chrono::duration<double>(Clock::now() - t0_).count();
    std::vector<EventCounters> events(specs_.size());
    for (const auto& ct : collectors_) {
        CollectorSnapshot c = ct->snapshot();
        hotplug_.annotate(c, ct->first_ring());
        add(s, c);
        for (size_t e = 0; e < events.size() && e < c.events.size(); ++e) {
            events[e].samples += c.events[e].samples;
            events[e].lost += c.events[e].lost;
            events[e].dropped += c.events[e].dropped;
        }
    }
    for (size_t e = 0; e < specs_.size(); ++e) {
        if (specs_[e].tracking) {
            // Records perf report needs to name processes and resolve symbols; their loss counts too.
            const uint64_t lost = lost_read_ ? event_lost_samples_[e] : events[e].lost;
            s.tracking_lost += lost;
            s.kernel_lost += lost;
            continue;
        }
        EventSummary es;
        es.name = specs_[e].name;
        es.samples = events[e].samples;
        es.lost = events[e].lost;
        es.lost_samples = event_lost_samples_[e];
        es.lost_read = lost_read_;
        es.dropped = events[e].dropped;
        s.kernel_lost += es.kernel_lost();
        s.events.push_back(es);
    }
    s.lost_samples = lost_samples_;
    s.synthesized_records = synth_.records;
    s.rounds = markers_;
    return s;
}

HostInfo Session::host_info() {
    HostInfo h = HostInfo::current(opts_.argv);
    if (h.bpf) {
        bpf_seen_.merge(*h.bpf);
        h.bpf = bpf_seen_;
    }
    return h;
}

}  // namespace ringcap
