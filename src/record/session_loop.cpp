// The record session while it runs, on the main thread: stop sources (signals, the command, the
// duration, collectors that end on their own), FINISHED_ROUND markers, the crash-safe header and CPU
// hotplug. A poll(2) loop that sleeps until its next deadline or an event (main_wake.hpp); nothing
// here is on the collectors' path.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <poll.h>
#include <sstream>
#include <unistd.h>

#include "ringcap/main_wake.hpp"
#include "ringcap/records.hpp"
#include "session.hpp"

namespace ringcap {

static_assert(std::chrono::duration<double>(MainWake::kQuietLongest).count() < kRoundTickBackstop,
              "an idle collector's backstop tick must come after the session's next round");

namespace {
constexpr auto kStatusEvery = std::chrono::seconds(1);
}  // namespace

MainWake Session::wake_plan(Clock::time_point now, Clock::time_point last_hotplug) {
    MainWake w;
    w.now = now;
    w.round_pending = round_ != 0;
    w.new_bytes = space_->end() - round_data_;
    w.last_round = last_round_;
    w.rounds_tick = rounds_by_time();
    w.quiet_spacing = quiet_spacing();
    w.duration_end = deadline_;
    if (opts_.live_status) w.status_due = last_status_ + kStatusEvery;
    if (source_->follows_cpus())
        w.hotplug_due = last_hotplug + (uevents_.fd() >= 0 ? MainWake::kHotplugUevents : MainWake::kHotplugLatest);
    if (opts_.switch_output.mode == SwitchOutput::Mode::Time)
        w.switch_due = file_started_ + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(opts_.switch_output.seconds));
    // On disk and not in the header yet: when it may be refreshed. Reserved and not yet on disk:
    // writes complete without telling this thread, so it looks again (the wake-ups of rounds
    // usually come first). (No refresh while a switch is under way: the loop below.)
    if (!next_output_) {
        w.header_due = output_->refresh_due(header_target());
        if (durable_end() < space_->end() && (!w.header_due || now + MainWake::kHeaderLatest < *w.header_due))
            w.header_due = now + MainWake::kHeaderLatest;
    }
    // Nothing signals a rotation's progress or the pipe's reader (-o -).
    w.polling = next_output_ || prev_output_ || switch_round_ != 0 || pipe_fd_ >= 0;
    return w;
}

void Session::wait_for_stop() {
    auto last_hotplug = Clock::now();
    bool watch_command = command_ != nullptr;
    for (;;) {
        pollfd fds[5] = {{signals_.fd(), POLLIN, 0}, {done_fd_.get(), POLLIN, 0},   {-1, POLLIN, 0},
                         {control_.fd(), POLLIN, 0}, {uevents_.fd(), POLLIN, 0}};
        if (watch_command) fds[2].fd = command_->pidfd();
        const MainWake w = wake_plan(Clock::now(), last_hotplug);
        // No round pending and less data than calls for one at the usual spacing: the reservation
        // that changes that wakes us (on the eventfd the collectors' acknowledgements use): the
        // first one after a round (its data wants the header refreshed), or the one past
        // kQuietBytes. Unless it came in between.
        const bool idle = w.new_bytes < MainWake::kQuietBytes && !w.round_pending;
        const uint64_t target = round_data_ + (w.new_bytes == 0 ? 1 : MainWake::kQuietBytes);
        if (!idle || space_->notify_growth(done_fd_.get(), target)) ::poll(fds, 5, w.timeout_ms());
        if (idle) space_->cancel_growth_notice();  // awake now: our own writes need not wake us
        if (fds[0].revents) {
            const std::string sig = signals_.take();
            if (sig != "SIGUSR2") {
                stop_reason_ = sig;
                return;
            }
            // --flight-recorder: a dump now. --switch-output (signal): the next round is a switch.
            // Otherwise ignored, as perf does.
            if (flight()) wanted_dumps_.push_back({"SIGUSR2", false});
            else switch_wanted_ = opts_.switch_output.mode == SwitchOutput::Mode::Signal;
        }
        if (fds[3].revents && !serve_control()) return;  // a control command: stop
        if (fds[4].revents && uevents_.take()) last_hotplug = Clock::time_point{};  // a CPU changed: look now
        if (watch_command && fds[2].revents) {
            // Per task, the record ends when every ring hung up (the command and all its children
            // exited); system-wide it ends with the command.
            if (!per_task_) {
                stop_reason_ = "command exited";
                return;
            }
            watch_command = false;  // a pidfd stays readable
        }
        if (fds[1].revents) {
            uint64_t n;
            [[maybe_unused]] ssize_t r = ::read(done_fd_.get(), &n, sizeof n);
        }
        bool all_ended = true;
        for (const auto& c : collectors_) {
            if (c->ended() && c->cause() == StopCause::WriteError) {
                stop_reason_ = "write error";
                return;
            }
            all_ended &= c->ended();
        }
        if (all_ended) {
            stop_reason_ = per_task_ ? "every task exited" : "every event hung up";
            return;
        }
        if (deadline_ && Clock::now() >= *deadline_) {
            stop_reason_ = "duration reached";
            return;
        }
        if (write_error_) {
            stop_reason_ = "write error";
            return;
        }
        if (std::string why = output_->stop_reason(); !why.empty()) {  // -o -: the reader
            // Said now: sending what was captured may take a while yet with a slow reader.
            clear_status();
            log_ << "ringcap: stopping: " << why << "\n" << std::flush;
            stop_reason_ = std::move(why);
            return;
        }
        if (space_->soft_limit_reached()) {
            stop_reason_ = "--max-size " + human_bytes(opts_.max_size) + " reached";
            return;
        }
        const uint64_t rounds_before = rounds_, pending_before = round_;
        try {
            round();
            rotation_step();
        } catch (const Error& e) {
            // The next file could not be created or the previous one finished: stop, keeping what
            // is in the current one.
            clear_status();
            log_ << "ringcap: ERROR: rotating the output failed: " << e.what() << "\n";
            error_ = std::string("rotating the output failed: ") + e.what();
            rotation_failed_ = true;
            stop_reason_ = "rotation failed";
            return;
        }
        // While the collectors move to the next file, what they owe is in two files: no refresh.
        // Nor when a round was just asked for: its acknowledgements bring what the collectors
        // flush for it within milliseconds, and the refresh after them covers both (at idle, one
        // fdatasync and header write per round instead of two).
        const bool round_asked = rounds_ == rounds_before && round_ != 0 && round_ != pending_before;
        if (!next_output_ && !round_asked) output_->refresh_header(header_target());
        if (opts_.live_status && Clock::now() - last_status_ >= kStatusEvery) print_status();
        // (Not while a switch is under way: the ids of reopened events go to the current file.)
        if (source_->follows_cpus() && !next_output_ && Clock::now() - last_hotplug >= MainWake::kHotplugEvery) {
            last_hotplug = Clock::now();
            follow_hotplug();
        }
    }
}

bool Session::rounds_by_time() const {
    // The collectors' quiet tick rides on the rounds; or a flight recorder's dumps keep to --max-size,
    // and a marker must come every quiet_spacing() whether or not the last flush brought data (its
    // compressed data reaches the window in bursts, at the collectors' tick or a round's flush).
    return rounds_tick_ || (flight() && opts_.max_size);
}

MainWake::Clock::duration Session::quiet_spacing() const {
    // A flight recorder's window starts at round markers: a twentieth of its duration apart at most.
    if (!flight()) return rounds_tick_ ? MainWake::quiet_spacing_for(quiet_rate_) : MainWake::kQuietSpacing;
    auto d = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.flight_recorder_s) / 20);
    // With --max-size a dump starts at the oldest marker from which it fits: markers about an eighth
    // of the bound apart, at the rate the window grew between the last two. (Compressed data reaches
    // the window in bursts that rounds flush: counting bytes as they come would not bring a round.)
    if (opts_.max_size && marks_.size() >= 2) {
        const WindowMark& a = marks_[marks_.size() - 2];
        const WindowMark& b = marks_.back();
        const double secs = std::chrono::duration<double>(b.at - a.at).count();
        if (b.offset > a.offset && secs > 0) {
            const double rate = double(b.offset - a.offset) / secs;
            d = std::min(d, std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(double(opts_.max_size) / 8 / rate)));
        }
    }
    return std::clamp<Clock::duration>(d, MainWake::kRoundSpacing, MainWake::kQuietSpacing);
}

uint64_t Session::header_target() {
    // A crash-safe header needs no refresh for a round marker alone: when the header already names
    // everything before the marker, a file cut short loses nothing without it (perf delivers what it
    // holds at the end), and an idle capture saves a write and a wake-up per round. With -z the
    // marker is what makes the data before it crash-safe (its anchor), so that data is published
    // with it.
    const uint64_t offset = output_->data_offset();
    const uint64_t end = crash_safe_end(), covered = offset + output_->header_covers();
    if (end > covered && covered >= marker_span_.first && end <= marker_span_.second) return covered - offset;
    return end - offset;
}

void Session::print_status() {
    // One line, rewritten in place (\r, then erase to its end): rates since the previous line.
    const auto now = Clock::now();
    const RecordSnapshot s = snapshot();
    const double dt = std::chrono::duration<double>(now - last_status_).count();
    const uint64_t written = s.bytes_written;
    char pressure[96] = "";
    if (s.total.cut || s.total.dropped || s.pressure.slowed || s.pressure.faster_zstd)
        std::snprintf(pressure, sizeof pressure, "  cut %llu  dropped %llu%s", static_cast<unsigned long long>(s.total.cut),
                      static_cast<unsigned long long>(s.total.dropped), s.pressure.slowed ? "  rate lowered" : "");
    // The file's size, or a flight recorder's window: how far back it reaches and its memory.
    char where[96];
    if (flight())
        std::snprintf(where, sizeof where, "window %.1f s %s%s", std::chrono::duration<double>(now - marks_.front().at).count(),
                      human_bytes(space_->end() - marks_.front().offset).c_str(), window_shrunk_ ? " (bound)" : "");
    else
        std::snprintf(where, sizeof where, "file %s", human_bytes(output_->data_offset() + space_->end()).c_str());
    char line[320];
    std::snprintf(line, sizeof line,
                  "\rringcap: %.0f s  %.0f samples/s  %.1f MB/s written  lost %llu%s  staging %.0f %%  %s\x1b[K",
                  s.seconds, double(s.total.samples - status_samples_) / dt, double(written - status_bytes_) / dt / 1e6,
                  static_cast<unsigned long long>(s.kernel_lost), pressure,
                  s.staging_bytes ? 100.0 * double(s.staging_used) / double(s.staging_bytes) : 0.0, where);
    log_ << line << std::flush;
    status_shown_ = true;
    status_samples_ = s.total.samples;
    status_bytes_ = written;
    last_status_ = now;
}

void Session::clear_status() {
    if (!status_shown_) return;
    log_ << "\r\x1b[K" << std::flush;  // the summary starts on a clean line
    status_shown_ = false;
}

void Session::round() {
    // perf report sorts by time and, at FINISHED_ROUND number k, delivers every record older than the
    // newest one it had seen before marker k-1. So marker k may only follow every byte of a complete
    // pass of every collector that began after marker k-1: each collector acknowledges request k
    // after such a pass, with what it drained queued below anything reserved later. Markers at least
    // kRoundSpacing apart keep cross-CPU clock skew and late commits well inside that window, and
    // bound what a reader holds in memory (main_wake.hpp).
    const auto now = Clock::now();
    if (round_ != 0) {
        for (const auto& c : collectors_)
            if (c->round_done() < round_ && !c->emptied()) return;  // not yet
        // What came per second since the last round (all of it is flushed for a quiet one): the
        // spacing of the next (MainWake::quiet_spacing_for).
        if (round_written_) {
            const double dt = std::chrono::duration<double>(now - last_round_).count();
            quiet_rate_ = last_round_ != Clock::time_point{} && dt > 0 ? double(space_->end() - round_end_) / dt : 0;
        }
        // A round of the quiet tick needs no marker of its own while little came since the last
        // one: a marker bounds what a reader holds in memory (at idle, rounds come every 30 s
        // with about 250 KiB), and it would cost a write of its own each round. Not with -z (the marker anchors
        // the compressed data), rotation or a flight recorder (they cut at markers), a dump or a
        // switch.
        if (round_written_ && space_->end() - marker_span_.second < MainWake::kQuietBytes && opts_.compression_level == 0 &&
            !rotating() && !flight() && switch_round_ != round_ && wanted_dumps_.empty()) {
            ++rounds_;
            round_data_ = round_end_ = space_->end();
            last_round_ = now;
            round_ = 0;
            return;
        }
        // One 4 KiB block: the marker, then padding (with -z a compression anchor).
        std::vector<std::byte> marker(sizeof(perf_event_header));
        const perf_event_header fr = finished_round_record();
        std::memcpy(marker.data(), &fr, sizeof fr);
        uint64_t at = 0;
        const uint64_t end = write_records(marker, &at);
        if (end == 0) return;
        marker_span_ = {at, end};
        if (flight()) {
            window_marker(end);
            dump_wanted();
        } else if (rotating()) {
            fold_tasks();
        }
        // Only data beyond the marker calls for another round: the marker itself is not new data
        // (else an idle capture would write a marker every round spacing, forever).
        round_data_ = round_end_ = end;
        ++rounds_;
        ++markers_;
        last_round_ = now;
        round_ = 0;
        if (switch_round_ == rounds_) {
            rotate();  // every collector moved: the marker above was the previous file's last record
            return;
        }
    }
    // Rotation: a switch is a round of its own, once the previous one is finished.
    if (rotating() && !next_output_ && !prev_output_ && switch_due()) {
        begin_switch();
        return;
    }
    // A new round only when there is new data (or the collectors' quiet tick rides on the rounds),
    // and not too soon.
    const uint64_t data = space_->end();
    const bool quiet = data - round_data_ < MainWake::kQuietBytes;
    const auto spacing = quiet ? quiet_spacing() : MainWake::kRoundSpacing;
    // A dump asked for: a round now, whatever came since the last one (its marker is where it ends).
    if (wanted_dumps_.empty() && ((data == round_data_ && !rounds_by_time()) || now - last_round_ < spacing)) return;
    round_data_ = data;
    round_ = rounds_ + 1;
    // A quiet round waits for its writes: the refresh after it then covers it whole (at idle one
    // fdatasync and header write per round). Not while the output is being switched.
    round_written_ = quiet && rounds_tick_ && !next_output_ && !prev_output_ && pipe_fd_ < 0;
    for (auto& c : collectors_) c->request_round(round_, round_written_);
}

bool Session::replace_ring(size_t ring) {
    // On the collector that owns the ring: drain it, let the source reopen it, adopt the new one.
    for (auto& c : collectors_) {
        if (ring < c->first_ring() || ring >= c->first_ring() + c->rings()) continue;
        bool reopened = false;
        std::string error;
        const size_t local = ring - c->first_ring();
        c->execute([&](Collector& col) {
            col.release_ring(local);
            try {
                reopened = source_->reopen(ring);
            } catch (const Error& e) {
                error = e.what();
            }
            if (reopened) announce_ids(ring);  // -o -: perf must know the ids before their records
            if (reopened) col.adopt_ring(local);
        });
        if (!error.empty()) throw Error(error);
        return reopened;
    }
    return false;
}

void Session::follow_hotplug() {
    std::ostringstream said;  // on a line of its own, not after the status line
    hotplug_.check(*source_, *output_, said, [this](size_t ring) { return replace_ring(ring); });
    if (said.tellp() > 0) {
        clear_status();
        log_ << said.str() << std::flush;
    }
}

}  // namespace ringcap
