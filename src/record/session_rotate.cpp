// Rotation (--switch-output) and --max-size: the record moves on to a new file, or stops before the
// file would pass a size.
//
// A switch rides on a FINISHED_ROUND round: each collector, at its acknowledgement of the switch
// round (after a complete pass, everything it drained queued for the current file), moves to the
// next file; its writes in flight end in the previous one. Nothing is read twice or left out, and no
// collector waits: the session creates, fills and finishes files on its own thread. Once every
// collector moved, the next file gets the records of what runs now and of the switch's tasks that
// exited since (so each file stands alone) and becomes the current one; once the previous file's
// writes all completed, it is finished (features, header) and named <out>.<YYYYmmddHHMMSScc>, as
// perf names it.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <sys/stat.h>
#include <unistd.h>

#include "ringcap/dso_files.hpp"
#include "ringcap/records.hpp"
#include "session.hpp"

namespace ringcap {

namespace {

// carry_tasks: how long before the switch an exit must be for its task to be left out (ns).
constexpr uint64_t kSwitchExitMargin = 100'000'000;

// <out>.<YYYYmmddHHMMSScc>, local time, as perf record --switch-output names its files: the stamp
// to start from (the name is taken by OutputFile::rename_to, which never replaces a file).
uint64_t timestamp_now() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    tm t{};
    localtime_r(&ts.tv_sec, &t);
    char when[32];
    std::strftime(when, sizeof when, "%Y%m%d%H%M%S", &t);
    return std::stoull(when) * 100 + uint64_t(ts.tv_nsec / 10000000);
}

}  // namespace

uint64_t Session::max_size_tail(const FileOutput& out) const {
    // The feature block as it would be now, doubled (build-ids of what gets mapped meanwhile), plus
    // LOST_SAMPLES for every event on every ring and a few round markers.
    std::vector<BuildIdEntry> ids;
    if (opts_.build_ids) ids = build_id_placeholders(dsos_.dsos(/*all=*/true));
    const uint64_t features = out.tail_bytes(HostInfo::current(opts_.argv), specs_, ids);
    const uint64_t lost = uint64_t(specs_.size()) * source_->rings().size() * sizeof(LostSamplesRecord);
    return 2 * features + (64u << 10) + lost + 4 * kStagingAlign;
}

std::unique_ptr<FileSpace> Session::make_space(const RecordOutput& out) {
    // With -z the data reaches the file at a few MB/s: preallocating 128 MiB ahead (so that O_DIRECT
    // writes run inline at hundreds of MB/s) would only leave a killed capture's file that much bigger.
    auto space = std::make_unique<FileSpace>(out.data_offset(),
                                             out.file().inline_writes() && opts_.compression_level == 0);
    if (opts_.max_size && !flight()) {
        const int done = done_fd_.get();
        space->on_soft_limit([done] {
            const uint64_t one = 1;
            [[maybe_unused]] ssize_t n = ::write(done, &one, sizeof one);
        });
        limit_space(*space, out);
    }
    space->allocate_now(out.file().buffered_fd());
    if (collectors_.size() > 1)
        space->on_allocated([this] {
            for (auto& c : collectors_) c->wake();
        });
    return space;
}

void Session::limit_space(FileSpace& space, const RecordOutput& out) {
    // The data may end at `hard` and still leave room for what follows it. The record stops once the
    // data passes `soft`: what is still in the rings and staging then fits below `hard` (with a small
    // --max-size, half of the room at least; buffers beyond `hard` are counted, not written).
    const uint64_t tail = max_size_tail(file_output());
    const uint64_t hard = opts_.max_size > tail ? opts_.max_size - tail : 0;
    if (hard < std::max(space.end(), out.data_offset()) + kStagingAlign)
        throw Error("--max-size " + human_bytes(opts_.max_size) + " is too small: the header, the records of what " +
                        "already runs and the features take " + human_bytes(space.end() + tail),
                    2);
    const uint64_t room = hard - out.data_offset();
    const uint64_t soft = out.data_offset() + std::max(room / 2, room > headroom_ ? room - headroom_ : 0);
    space.set_limit(soft, hard);
}

bool Session::switch_due() const {
    switch (opts_.switch_output.mode) {
        case SwitchOutput::Mode::Signal: return switch_wanted_;
        case SwitchOutput::Mode::Size: return space_->end() - output_->data_offset() >= opts_.switch_output.bytes;
        case SwitchOutput::Mode::Time:
            return Clock::now() - file_started_ >= std::chrono::duration<double>(opts_.switch_output.seconds);
        case SwitchOutput::Mode::None: break;
    }
    return false;
}

void Session::begin_switch() {
    // The next file under a temporary name, its space allocated: the collectors write into it from
    // their acknowledgement of the switch round on.
    switch_wanted_ = false;
    auto next = std::make_unique<FileOutput>(opts_.output, opts_.allow_direct, output_->attrs(), /*own_path=*/true);
    if (opts_.compression_level > 0) next->set_crash_features(kAnchorFeatures);
    next_space_ = make_space(*next);
    next_output_ = std::move(next);
    switch_round_ = rounds_ + 1;
    // A sample older than this was written before the collectors mark their rings for the switch
    // round, so it goes to the current file (carry_tasks; as of their last passes, maybe a tick ago).
    switch_time_ = 0;
    for (const auto& c : collectors_) switch_time_ = std::max(switch_time_, c->last_time());
    for (auto& c : collectors_) c->request_switch(switch_round_, &next_output_->file(), next_space_.get());
    round_ = switch_round_;
    round_data_ = space_->end();
    for (auto& c : collectors_) c->request_round(round_);
}

void Session::rotate() {
    prev_output_.reset(static_cast<FileOutput*>(output_.release()));  // a file: rotation refuses -o -
    prev_space_ = std::move(space_);
    output_ = std::move(next_output_);
    space_ = std::move(next_space_);
    switched_round_ = switch_round_;
    switch_round_ = 0;
    anchors_.clear();  // offsets of the previous file
    marker_span_ = {};
    // Each file stands alone: the records of every live thread, map and the kernel again, and of the
    // tasks that ran at the switch but exited since (carry_tasks). Their time is 0, so perf orders
    // them first although samples precede them in the file (no round marker is written before them).
    write_start_records(/*next_file=*/true);
    round_data_ = space_->end();
    file_started_ = Clock::now();
}

void Session::carry_tasks(std::vector<std::byte>& start, const TaskSet& present, bool next_file) {
    // The /proc scan runs once every collector moved, and each moved at its own point of its
    // stream: a task whose COMM/FORK went to the previous file may have samples after the switch in
    // this one and exit before the scan (a short-lived process; at the end, ringcap's collector
    // threads; always, with a command's per-task events, which the scan leaves to their own
    // records). The records of tasks and mappings the collectors copied (every one before its switch
    // handed over with its acknowledgement, or its drain) name them, as the flight recorder's state
    // does a dump's. Only those that may have samples here: a ring's samples come in time order, so
    // the ones after the switch are no older than its last one before (and than switch_time_); a
    // task that exited before the oldest of those, by a margin (cross-CPU clock skew, records
    // committed late), has none here.
    if (!next_file) {
        for (size_t at = 0; start.size() - at >= sizeof(perf_event_header);) {
            perf_event_header h;
            std::memcpy(&h, start.data() + at, sizeof h);
            if (h.size < sizeof h || h.size > start.size() - at) break;
            sideband_.add(start.data() + at, h.size);  // those that describe tasks and mappings
            at += h.size;
        }
        sideband_.fold(0);  // their time is 0: the state at the start
        return;
    }
    uint64_t after = UINT64_MAX;
    for (const auto& c : collectors_) {
        const auto sp = c->switch_point();
        if (sp.round != switched_round_) continue;  // it emptied its rings before: nothing of it here
        for (const auto& r : sp.counters.rings) after = std::min(after, std::max(r.ring.last_time, switch_time_));
    }
    if (after == UINT64_MAX) after = switch_time_;
    take_sideband();
    sideband_.fold(sideband_.newest(), after > kSwitchExitMargin ? after - kSwitchExitMargin : 0);
    sideband_.emit_gone(start, present);
}

void Session::fold_tasks() {
    // Folded up to the newest time reported at the marker before (everything up to there was drained
    // and handed over by this one's acknowledgements), so that the records kept stay a round's.
    take_sideband();
    sideband_.fold(tasks_time_);
    tasks_time_ = 0;
    for (const auto& c : collectors_) tasks_time_ = std::max(tasks_time_, c->last_time());
}

void Session::rotation_step() {
    if (!prev_output_) return;
    for (const auto& c : collectors_)
        if (!c->previous_settled()) return;
    finish_previous();
}

void Session::finish_previous() {
    // Every write to it completed: its data ends where its space ends, or after a failed write at
    // the last whole record on disk.
    FileOutput& out = *prev_output_;
    uint64_t data_size = prev_space_->end() - out.data_offset();
    uint64_t failed = UINT64_MAX;
    for (const auto& c : collectors_) failed = std::min(failed, c->previous_failed_offset());
    if (failed != UINT64_MAX) data_size = out.last_record_end(0, failed - out.data_offset());
    const uint64_t unwritten = prev_space_->end() - out.data_offset() - data_size;
    // Its samples and time range: the collectors' counters at their switch (the time range starts
    // again there). A collector that has not switched (it emptied its rings before) wrote all into it.
    if (samples_at_switch_.size() != collectors_.size()) samples_at_switch_.assign(collectors_.size(), 0);
    uint64_t samples = 0;
    RingCounters range;
    for (size_t i = 0; i < collectors_.size(); ++i) {
        const auto sp = collectors_[i]->switch_point();
        const CollectorSnapshot counters = sp.round == switched_round_ ? sp.counters : collectors_[i]->snapshot();
        RingCounters total;
        for (const auto& r : counters.rings) total += r.ring;
        // With -z, drained samples may still be with the encoder at the switch: they go to the
        // next file. What was placed in the output buffers by then is this file's.
        const uint64_t at = opts_.compression_level > 0 ? counters.samples_placed : total.samples;
        samples += at - samples_at_switch_[i];
        samples_at_switch_[i] = at;
        range += total;
    }
    const RecordSnapshot snap = snapshot();
    const CompressionFeature comp = compression_feature(&snap);
    const SampleTimeRange times{range.first_time, range.last_time};
    // The DSOs hit so far (every collector handed its pages over at its switch): this file's and
    // maybe a few of the files before it.
    const std::vector<BuildIdEntry> build_ids = opts_.build_ids ? build_id_list() : std::vector<BuildIdEntry>{};
    const std::string feature_error =
        out.finish(data_size, host_info(), specs_, opts_.build_ids ? &build_ids : nullptr,
                   opts_.compression_level > 0 ? &comp : nullptr, range.first_time ? &times : nullptr);
    clear_status();  // what follows goes on lines of its own
    if (!feature_error.empty()) log_ << "ringcap: the header features were not written (" << feature_error << ")\n";
    name_finished(out.file(), data_size, samples);
    if (failed != UINT64_MAX)
        log_ << "ringcap: ERROR: a write to " << files_.back() << " failed: it keeps " << data_size
             << " bytes of data, up to the last whole record before the failure (" << unwritten
             << " bytes not written)\n";
    unwritten_bytes_ += unwritten;
    file_bytes_ += data_size;
    if (opts_.build_id_cache && !build_ids.empty()) cache_build_ids(build_ids);
    prev_output_.reset();
    prev_space_.reset();
    // Its name is free: the current file takes it.
    publish_output();
}

void Session::publish_output() {
    output_->publish(crash_safe_end() - output_->data_offset());
    for (const auto& note : output_->file().take_notes()) {
        clear_status();
        log_ << "ringcap: warning: " << note << "\n";
    }
}

void Session::name_finished(OutputFile& file, uint64_t data_size, std::optional<uint64_t> samples, const std::string& note) {
    // Two switches in one centisecond, or a file left by an earlier record: the next stamp.
    std::string name;
    for (uint64_t stamp = timestamp_now();; ++stamp) {
        name = opts_.output + "." + std::to_string(stamp);
        if (file.rename_to(name)) break;
    }
    files_.push_back(name);
    log_ << "ringcap: [ dump " << name << " ] " << human_bytes(data_size) << " of data";
    if (samples) log_ << ", " << *samples << " samples";
    if (!note.empty()) log_ << " (" << note << ")";
    log_ << "\n";
    const size_t keep = opts_.switch_output.max_files;  // also the flight recorder's dumps
    while (keep && files_.size() > keep) {
        if (const int err = file.remove_sibling(files_.front()); err == 0)
            log_ << "ringcap: removed " << files_.front() << " (--switch-max-files " << keep << ")\n";
        else
            log_ << "ringcap: warning: cannot remove " << files_.front() << ": " << errno_text(err) << "\n";
        files_.erase(files_.begin());
    }
}

}  // namespace ringcap
