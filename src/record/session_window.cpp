// --flight-recorder: the window (window_output.hpp) kept to its duration and its memory bound, the
// tasks and mappings folded as its start moves (sideband_state.hpp), and the dumps: each one a
// perf.data file of its own, written from the window's memory while the collectors go on.
#include <algorithm>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <ctime>

#include "ringcap/records.hpp"
#include "session.hpp"

namespace ringcap {

namespace {

uint64_t mem_available() {
    if (const auto text = read_text_file("/proc/meminfo")) {
        const auto at = text->find("MemAvailable:");
        if (at != std::string::npos) return std::strtoull(text->c_str() + at + 13, nullptr, 10) * 1024;
    }
    return 0;
}

}  // namespace

uint64_t Session::window_bound() const {
    if (window_bound_) return window_bound_;  // read once, at the start
    if (opts_.flight_recorder_size) return window_bound_ = opts_.flight_recorder_size;
    // An eighth of the memory available at the start (the window is charged to ringcap's memory
    // cgroup, whose limit the plan already fitted staging to), between 64 MiB and 4 GiB.
    uint64_t bound = std::clamp<uint64_t>(mem_available() / 8, 64ull << 20, 4ull << 30);
    const HostLimits host = HostLimits::current();
    if (host.memory_limit && *host.memory_limit > host.memory_usage)
        bound = std::min(bound, std::max<uint64_t>((*host.memory_limit - host.memory_usage) / 2, 16ull << 20));
    return window_bound_ = bound;
}

void Session::keep_start_records(std::vector<std::byte>& start) {
    // What describes tasks and mappings goes to the state a dump writes first; the rest (the id
    // index, thread and CPU maps, BPF programs) starts every dump as it is.
    size_t at = 0;
    while (start.size() - at >= sizeof(perf_event_header)) {
        perf_event_header h;
        std::memcpy(&h, start.data() + at, sizeof h);
        if (h.size < sizeof h || h.size > start.size() - at) break;
        if (SidebandState::wanted(h.type)) sideband_.add(start.data() + at, h.size);
        else if (h.type != kRecordFinishedInit) start_head_.insert(start_head_.end(), start.data() + at, start.data() + at + h.size);
        at += h.size;
    }
    sideband_.fold(0);  // their time is 0: they are the state at the start
    marks_.push_back({space_->end(), Clock::now(), 0});
}

void Session::take_sideband() {
    std::vector<std::byte> records;
    {
        std::lock_guard lock(sideband_inbox_.mu);
        records.swap(sideband_inbox_.records);
    }
    size_t at = 0;
    while (records.size() - at >= sizeof(perf_event_header)) {
        perf_event_header h;
        std::memcpy(&h, records.data() + at, sizeof h);
        if (h.size < sizeof h || h.size > records.size() - at) break;
        sideband_.add(records.data() + at, h.size);
        at += h.size;
    }
}

void Session::window_marker(uint64_t end) {
    // Every record below this marker was drained, and its time reported, before the collectors'
    // last passes: their newest times bound it (read again at the next marker for a margin).
    uint64_t t = 0;
    for (const auto& c : collectors_) t = std::max(t, c->last_time());
    marks_.push_back({end, Clock::now(), t});
    trim_window();
}

void Session::trim_window() {
    // The window starts at the oldest mark from which it still reaches back the duration, and holds
    // at most the memory bound. The newest two marks are never its start: the state is folded up to
    // the time reported at the mark after the start, by when everything below the start had been
    // drained and reported.
    const auto now = Clock::now();
    const auto duration = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.flight_recorder_s));
    const uint64_t bound = window_bound();
    bool moved = false;
    while (marks_.size() >= 3) {
        const bool old = marks_[1].at <= now - duration;
        const bool big = space_->end() - marks_[0].offset + sideband_.bytes() > bound;
        if (!old && !big) break;
        if (!moved) take_sideband();
        moved = true;
        if (big && !old && !window_shrunk_ && opts_.verbose) {
            clear_status();
            log_ << "ringcap: flight recorder: the window reached its memory bound (" << human_bytes(bound)
                 << ", --flight-recorder-size): it now reaches back "
                 << std::fixed << std::setprecision(1) << std::chrono::duration<double>(now - marks_[1].at).count()
                 << " s, less than the " << opts_.flight_recorder_s << " s asked for\n";
        }
        window_shrunk_ |= big && !old;
        sideband_.fold(marks_[2].time);
        marks_.pop_front();
        window().drop_below(marks_.front().offset);
    }
}

bool Session::dump(const std::string& trigger) {
    // The window as it is now: the start records that are neither tasks nor mappings, the tasks and
    // mappings as of its start, then its data (at a buffer boundary after a round marker) up to what
    // is on its way to memory. The collectors go on meanwhile; the window does not move until done.
    trim_window();  // to now: the duration and the bound hold for the dump too
    take_sideband();
    std::vector<std::byte> head = start_head_;
    sideband_.emit(head);
    DumpInfo info;
    info.trigger = trigger;
    try {
        FileOutput out(opts_.output, /*allow_direct=*/false, output_->attrs(), /*own_path=*/true);
        // Up to the newest marker at least: the writes below it are in memory within a moment (a
        // memfd's writes do not wait for a disk), and this thread is not told when.
        for (int i = 0; i < 2000 && durable_end() < marks_.back().offset && !write_error_; ++i) {
            timespec ms{0, 1'000'000};
            nanosleep(&ms, nullptr);
        }
        const uint64_t to = durable_end();
        // --max-size: the dump starts at a later mark if the whole window, with room for the
        // features, would pass it; the state is then folded up to there in a copy. The window
        // itself stays.
        const uint64_t tail = opts_.max_size ? max_size_tail(out) : 0;
        size_t first = 0;
        while (opts_.max_size && first + 1 < marks_.size() &&
               out.data_offset() + head.size() + (to - marks_[first].offset) + tail > opts_.max_size)
            ++first;
        if (first > 0) {
            SidebandState later = sideband_;
            uint64_t t = 0;
            for (const auto& c : collectors_) t = std::max(t, c->last_time());
            later.fold(first + 1 < marks_.size() ? marks_[first + 1].time : t);
            head = start_head_;
            later.emit(head);
        }
        if (opts_.max_size && out.data_offset() + head.size() + (to - marks_[first].offset) + tail > opts_.max_size)
            log_ << "ringcap: warning: the " << trigger << " dump may pass --max-size " << human_bytes(opts_.max_size)
                 << ": it cannot start later than its newest round marker, and " << human_bytes(to - marks_[first].offset)
                 << " came since (with room for the features kept)\n";
        const uint64_t from = std::min(marks_[first].offset, to);
        const perf_event_header init{kRecordFinishedInit, 0, sizeof(perf_event_header)};
        const auto* ib = reinterpret_cast<const std::byte*>(&init);
        head.insert(head.end(), ib, ib + sizeof init);
        info.window_seconds = std::chrono::duration<double>(Clock::now() - marks_[first].at).count();
        info.start_time = marks_[first].time;
        if (info.start_time == 0)  // the window still starts at the record's start
            for (const auto& c : collectors_) {
                const uint64_t t = c->first_time();
                if (t && (!info.start_time || t < info.start_time)) info.start_time = t;
            }
        for (const auto& c : collectors_) info.end_time = std::max(info.end_time, c->last_time());
        const uint64_t at = out.data_offset();
        info.data_bytes = head.size() + (to - from);
        out.file().pwrite_all(head.data(), head.size(), at);
        if (const int err = copy_range(output_->file().buffered_fd(), from, out.file().buffered_fd(), at + head.size(), to - from))
            throw Error("copying the window: " + errno_text(err) + write_error_hint(err) + "; the dump needs " +
                        human_bytes(info.data_bytes) + " and its features where -o names it");
        const RecordSnapshot snap = snapshot();
        const CompressionFeature comp = compression_feature(&snap);
        const SampleTimeRange times{info.start_time ? info.start_time : snap.total.first_time, info.end_time};
        const std::vector<BuildIdEntry> build_ids = opts_.build_ids ? build_id_list() : std::vector<BuildIdEntry>{};
        const std::string feature_error = out.finish(info.data_bytes, host_info(), specs_, opts_.build_ids ? &build_ids : nullptr,
                                                     &comp, times.first ? &times : nullptr);
        clear_status();
        if (!feature_error.empty()) log_ << "ringcap: the dump's header features were not written (" << feature_error << ")\n";
        std::ostringstream note;
        note << "window " << std::fixed << std::setprecision(1) << info.window_seconds << " s, " << trigger;
        name_finished(out.file(), info.data_bytes, std::nullopt, note.str());
        info.path = files_.back();
        file_bytes_ += info.data_bytes;
        dump_counter_.start(out.file().buffered_fd(), at, info.data_bytes, info.samples, /*background=*/!stopped_);
        if (opts_.build_id_cache && !build_ids.empty()) cache_build_ids(build_ids);
    } catch (const Error& e) {
        clear_status();
        log_ << "ringcap: ERROR: the flight recorder's dump (" << trigger << ") failed: " << e.what() << "\n";
        if (error_.empty()) error_ = std::string("a dump failed: ") + e.what();
        dumps_failed_ = true;
        return false;
    }
    dumps_.push_back(std::move(info));
    return true;
}

void Session::dump_wanted() {
    auto wanted = std::move(wanted_dumps_);
    wanted_dumps_.clear();
    for (const auto& w : wanted) {
        dump(w.trigger);
        if (w.ack) control_.ack();  // done (or failed, and said so): the asker goes on either way
    }
}

void Session::finish_window() {
    stopped_ = true;  // what is counted now is waited for
    dump_wanted();  // asked for before the stop: everything drained is in them too
    trim_window();
    window_end_ = {std::chrono::duration<double>(Clock::now() - marks_.front().at).count(), space_->end() - marks_.front().offset};
    if (command_ && opts_.flight_recorder_on_failure) {
        const CommandOutcome c = command_->finish();
        if (c.exit_code == 0) {
            log_ << "ringcap: the command " << c.what << ": no dump at the end (--flight-recorder-on-failure)\n";
            dump_counter_.join();
            return;
        }
        dump("command " + c.what);
    } else {
        dump("end");
    }
    dump_counter_.join();
}

bool Session::serve_control() {
    for (const std::string& cmd : control_.take()) {
        if (cmd == "stop") {
            if (stop_reason_.empty()) stop_reason_ = "control: stop";  // (at the stop: it stops anyway)
            control_.ack();
            return false;
        }
        if (cmd == "snapshot") {
            if (flight()) {
                wanted_dumps_.push_back({"control", true});  // acknowledged once written
                continue;
            }
            if (opts_.switch_output.mode == SwitchOutput::Mode::Signal) switch_wanted_ = true;
            else log_ << "ringcap: control: snapshot needs --flight-recorder or --switch-output; ignored\n";
        } else if (cmd == "enable") {
            source_->enable();
        } else if (cmd == "disable") {
            source_->disable();
        } else if (cmd != "ping") {
            log_ << "ringcap: control: unknown command '" << cmd << "' (snapshot, stop, ping, enable, disable)\n";
        }
        control_.ack();
    }
    return true;
}

}  // namespace ringcap
