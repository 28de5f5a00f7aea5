// The record coordinator: plan -> open the source -> collector -> output -> synthesize -> start ->
// run -> stop -> finish. Each step is one call into the stage that owns it.
#include "ringcap/recorder.hpp"

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <memory>
#include <optional>
#include <sys/wait.h>
#include <ostream>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

#include "ringcap/collector.hpp"
#include "ringcap/file_output.hpp"
#include "ringcap/hotplug.hpp"
#include "ringcap/perf_source.hpp"
#include "ringcap/plan.hpp"
#include "ringcap/process.hpp"
#include "ringcap/records.hpp"

namespace ringcap {

namespace {

using Clock = std::chrono::steady_clock;

// Opens the source with the plan's rings. While the kernel refuses the ring memory, every ring is
// halved (all of them, to keep them even) down to kMinRingPages: perf fails here instead.
size_t open_source(RingSource& source, const RecordPlan& plan, std::ostream& log, std::vector<perf_event_attr>& attrs) {
    const size_t requested = plan.ring_pages();
    size_t pages = requested;
    for (;;) {
        std::string note;
        attrs = plan.attrs(pages, &note);
        if (!note.empty() && pages == requested) log << "ringcap: " << note << "\n";
        try {
            source.open(attrs, pages);
            break;
        } catch (const RingMemoryError&) {
            if (pages <= RecordPlan::kMinRingPages) throw;
            pages /= 2;
        }
    }
    if (pages != requested)
        log << "ringcap: ring memory for " << (plan.ring_pages_given() ? "-m " : "the default -m ") << requested
            << " was refused (above the locked-memory limit, kernel.perf_event_mlock_kb + RLIMIT_MEMLOCK, or "
               "out of memory); using -m "
            << pages << " instead. Raise the limits or run with CAP_IPC_LOCK for bigger rings.\n";
    return pages;
}

// Adds a collector's counters to a record snapshot (one per collector, once there are several).
void add(RecordSnapshot& s, const CollectorSnapshot& c) {
    for (const auto& r : c.rings) {
        s.cpus.push_back(r);
        s.total += r.ring;
    }
    s.cqes += c.loop.ring_events;
    s.rearms += c.loop.rearms;
    s.waits += c.loop.waits;
    s.waits_after_hangup += c.waits_after_hangup;
    s.writes += c.writer.writes;
    s.preallocations += c.writer.preallocations;
    s.writes_beyond_allocation += c.writer.beyond_allocation;
    s.bytes_written += c.writer.bytes;
    s.hangups += c.hangups;
    s.rounds += c.rounds;
    s.ring_bytes += c.ring_bytes;
    s.staging_bytes += c.staging_bytes;
}

class Session final : public CollectorControl {
public:
    Session(const RecordOptions& o, std::ostream& log, SignalBlock& signals, Command* command)
        : opts_(o), log_(log), signals_(signals), command_(command), per_task_(per_task(o)) {}
    int run(RingSource& source, RecordSummary& sum);
    RecordSnapshot snapshot() const;

    // CollectorControl
    void on_control(Source s) override;
    bool stop_requested() const override { return stop_; }
    void after_pass() override;
    void on_tick() override { check_cpus_ = true; }

private:
    std::vector<AttrEntry> attr_entries(RingSource& source, const std::vector<perf_event_attr>& attrs) const;
    void print_setup(const RingSource& source, const RecordPlan& plan, size_t ring_pages) const;
    void synthesize(RingSource& source);
    void stop(RingSource& source);
    void finish();

    const RecordOptions& opts_;
    std::ostream& log_;
    SignalBlock& signals_;
    Command* command_;
    const bool per_task_;
    std::vector<EventSpec> specs_;
    std::unique_ptr<FileOutput> output_;       // before collector_: its writer refers to the file
    std::unique_ptr<FileSpace> space_;         // likewise
    std::unique_ptr<Collector> collector_;
    std::set<std::string> synthesized_dsos_;  // executable mappings in the /proc synthesis
    SynthesisStats synth_;
    std::vector<uint64_t> event_lost_samples_;
    uint64_t lost_samples_ = 0;
    uint64_t file_bytes_ = 0;
    Clock::time_point t0_{};   // the events were enabled
    std::optional<Clock::time_point> deadline_;  // --duration
    double seconds_ = -1;  // capture time, set at stop; until then snapshot() measures
    bool stop_ = false;
    std::string stop_reason_;
    RingSource* source_ = nullptr;
    bool check_cpus_ = false;  // the tick asks for a look at the online CPUs
    HotplugWatch hotplug_;
};

void Session::on_control(Source s) {
    if (stop_) return;
    switch (s) {
        case Source::Signal:
            stop_reason_ = signals_.take();
            stop_ = true;
            break;
        case Source::Child:
            // Per task, the record ends when every ring hung up (the command and all its children
            // exited); system-wide it ends with the command.
            if (!per_task_) {
                stop_reason_ = "command exited";
                stop_ = true;
            }
            break;
        case Source::Timer:
            stop_reason_ = "duration reached";
            stop_ = true;
            break;
        case Source::Tick:
            break;  // the collector's own
    }
}

std::vector<AttrEntry> Session::attr_entries(RingSource& source, const std::vector<perf_event_attr>& attrs) const {
    std::vector<AttrEntry> entries(specs_.size());
    for (size_t e = 0; e < entries.size(); ++e) {
        entries[e].attr = attrs[e];
        entries[e].name = specs_[e].name;
    }
    for (const auto& ring : source.rings())
        for (const auto& ev : ring.events) entries[ev.event_index].ids.push_back(ev.id);
    return entries;
}

int Session::run(RingSource& source, RecordSummary& sum) {
    // 1. Plan: every derived setting, once.
    source_ = &source;
    const RecordPlan plan = RecordPlan::make(opts_, source, HostLimits::current());
    for (const auto& note : plan.notes()) log_ << "ringcap: " << note << "\n";
    ensure_fd_limit(source.fd_count());

    // 2. Open the source: events disabled, rings mapped (before any poll: seed 000). It may adjust
    // the attrs and names (user-space only when the kernel allows no more).
    std::vector<perf_event_attr> attrs;
    const size_t ring_pages = open_source(source, plan, log_, attrs);
    for (const auto& note : source.notes()) log_ << "ringcap: " << note << "\n";
    specs_ = source.specs();
    event_lost_samples_.assign(specs_.size(), 0);
    hotplug_ = HotplugWatch(source.rings().size());

    // 3. The collector: loop, staging, readers. -r applies to its thread here, before any file.
    CollectorConfig cc;
    cc.loop = plan.loop();
    cc.staging_buffers = plan.staging_buffers();
    cc.staging_buffer_bytes = plan.staging_buffer_bytes();
    cc.events = specs_.size();
    cc.track_dsos = opts_.build_ids;
    cc.realtime_priority = opts_.realtime_priority;
    collector_ = std::make_unique<Collector>(cc, source.rings(), *this, log_);
    if (!collector_->fallback_reason().empty())
        log_ << "ringcap: io_uring unavailable, using epoll: " << collector_->fallback_reason() << "\n";

    // 4. Output, under a temporary name until the start of it is on disk.
    output_ = std::make_unique<FileOutput>(opts_.output, opts_.allow_direct, attr_entries(source, attrs));
    space_ = std::make_unique<FileSpace>(output_->data_offset(), output_->file().inline_writes());
    space_->allocate_now(output_->file().buffered_fd());
    collector_->attach(output_->file(), *space_);
    if (opts_.verbose) print_setup(source, plan, ring_pages);
    collector_->watch_control(Source::Signal, signals_.fd());
    if (command_) collector_->watch_control(Source::Child, command_->pidfd());
    collector_->arm();

    // 5. What already runs, written first and made durable with its header. Setup succeeded: only
    // now is an existing output touched (perf keeps one .old), and the file is valid from here on.
    synthesize(source);
    collector_->flush_start();
    if (collector_->writer().failed())
        throw Error("cannot write the start of '" + opts_.output + "': " + errno_text(collector_->writer().error()) +
                    write_error_hint(collector_->writer().error()));
    output_->publish(collector_->writer().durable_size());

    // 6. Start; --duration counts from here (with many CPUs, enabling every event takes a while).
    const auto enable_start = Clock::now();
    source.enable();
    t0_ = Clock::now();
    if (opts_.verbose)
        log_ << "ringcap: events enabled in " << std::fixed << std::setprecision(1)
             << std::chrono::duration<double, std::milli>(t0_ - enable_start).count() << " ms\n";
    if (opts_.duration_s > 0) {
        collector_->set_timer(opts_.duration_s);
        deadline_ = t0_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.duration_s));
    }
    if (command_) command_->start();

    // 7. Run until a stop source fires, every ring hung up, or a write failed.
    switch (collector_->run()) {
        case StopCause::Requested:
            break;  // on_control said why
        case StopCause::WriteError:
            stop_reason_ = "write error";
            break;
        case StopCause::AllHungUp:
            stop_reason_ = per_task_ ? "every task exited" : "every event hung up";
            break;
    }

    // 8. Stop, 9. finish the file.
    stop(source);
    finish();

    static_cast<RecordSnapshot&>(sum) = snapshot();
    sum.path = opts_.output;
    sum.backend = collector_->loop().name();
    sum.stop_reason = stop_reason_;
    sum.file_bytes = file_bytes_;
    sum.o_direct = output_->file().o_direct();
    sum.exit_code = collector_->writer().failed() ? 1 : 0;
    if (command_) {
        const CommandOutcome c = command_->finish();
        sum.command_status = c.what;
        // As perf record: the command's own failure is the record's exit status, if the record succeeded.
        if (sum.exit_code == 0) sum.exit_code = c.exit_code;
    }
    print_summary(sum, log_);
    return sum.exit_code;
}

void Session::after_pass() {
    output_->refresh_header(collector_->writer());
    if (check_cpus_) {
        check_cpus_ = false;
        hotplug_.check(*source_, *collector_, *output_, log_);
    }
    // The timer may fire late on a loaded machine; the clock decides.
    if (deadline_ && !stop_ && Clock::now() >= *deadline_) {
        stop_reason_ = "duration reached";
        stop_ = true;
    }
}

void Session::print_setup(const RingSource& source, const RecordPlan& plan, size_t ring_pages) const {
    size_t events = 0;
    for (const auto& sp : specs_) events += sp.tracking ? 0 : 1;
    const size_t rings = source.ring_count();
    log_ << "ringcap: backend " << collector_->loop().describe() << "; polling " << rings << " ring owner fd(s)\n"
         << "ringcap: " << rings << " ring(s) of " << ring_pages << " data pages ("
         << human_bytes(ring_pages * page_size()) << ") for " << events << " event(s), " << source.describe() << "\n"
 << "ringcap: staging " << plan.staging_buffers() << " x " << human_bytes(plan.staging_buffer_bytes())
         << " (4 KiB aligned), output '" << opts_.output << "' "
         << (output_->file().o_direct() ? "O_DIRECT" : "buffered (O_DIRECT refused or disabled)")
         << ", data at offset " << output_->data_offset() << "\n";
}

void Session::synthesize(RingSource& source) {
    // The tracking event starts before the /proc scan, so nothing that starts meanwhile is missed
    // (a duplicate is harmless).
    source.start_tracking();
    const RecordSink sink = [this](const void* rec, size_t n) {
        perf_event_header h;
        std::memcpy(&h, rec, sizeof h);
        if (opts_.build_ids && h.type == PERF_RECORD_MMAP2 && !(h.misc & PERF_RECORD_MISC_MMAP_DATA)) {
            const char* name = static_cast<const char*>(rec) + field::kMmap2Filename;
            if (name[0] == '/') synthesized_dsos_.insert(name);
        }
        collector_->append(rec, n);
    };
    source.synthesize(sink, synth_);
    if (!synth_.kernel_scanned) return;  // the source describes no real processes
    if (opts_.verbose)
        log_ << "ringcap: synthesized " << synth_.threads << " threads of " << synth_.processes << " processes, "
             << synth_.maps << " executable maps" << (synth_.kernel_map ? ", the kernel map" : "") << " ("
             << human_bytes(synth_.bytes) << ") in " << std::fixed << std::setprecision(3) << synth_.seconds << " s\n";
    if (!synth_.kernel_map)
        log_ << "ringcap: /proc/kallsyms hides kernel addresses (kernel.kptr_restrict): kernel samples will not "
                "resolve to symbols\n";
}

void Session::stop(RingSource& source) {
    const auto stop_start = Clock::now();
    seconds_ = std::chrono::duration<double>(stop_start - t0_).count();
    source.disable();  // afterwards every record is in the rings
    if (opts_.verbose)
        log_ << "ringcap: events disabled in " << std::fixed << std::setprecision(1)
             << std::chrono::duration<double, std::milli>(Clock::now() - stop_start).count() << " ms\n";
    collector_->drain_rest();
    for (const auto& l : source.lost_counts()) {
        // Samples the source dropped for this event; perf record writes them the same way.
        const auto rec = make_lost_samples(l.id, l.cpu, l.lost);
        collector_->append(&rec, sizeof rec);
        lost_samples_ += l.lost;
        event_lost_samples_[l.event_index] += l.lost;
    }
}

void Session::finish() {
    collector_->flush();
    Writer& w = collector_->writer();
    // Everything if all writes succeeded; after a failure, the last whole record that reached the
    // disk before it (a full disk keeps all that fit).
    file_bytes_ = w.durable_size();
    if (w.failed()) file_bytes_ = output_->last_record_end(file_bytes_, w.bytes_kept());
    std::set<std::string> dsos = synthesized_dsos_;
    dsos.insert(collector_->dsos().begin(), collector_->dsos().end());
    const std::string feature_error =
        output_->finish(file_bytes_, HostInfo::current(opts_.argv), specs_, opts_.build_ids ? &dsos : nullptr);
    if (w.failed())
        log_ << "ringcap: ERROR: writing '" << opts_.output << "' failed: " << errno_text(w.error())
             << write_error_hint(w.error()) << "; capture stopped and kept " << file_bytes_ << " bytes of data (" << w.bytes_queued() - file_bytes_
             << " bytes not written); the file is valid up to there. The counts below are of what was read from "
                "the rings; not all of it reached the file\n";
    if (!feature_error.empty()) log_ << "ringcap: the header features were not written (" << feature_error << ")\n";
}

RecordSnapshot Session::snapshot() const {
    RecordSnapshot s;
    s.seconds = seconds_ >= 0 ? seconds_ : std::chrono::duration<double>(Clock::now() - t0_).count();
    CollectorSnapshot c = collector_->snapshot();
    hotplug_.annotate(c);
    add(s, c);
    for (size_t e = 0; e < specs_.size(); ++e) {
        if (specs_[e].tracking) {
            // Records perf report needs to name processes and resolve symbols; their loss counts too.
            const uint64_t lost = event_lost_samples_[e] ? event_lost_samples_[e] : c.events[e].lost;
            s.tracking_lost += lost;
            s.kernel_lost += lost;
            continue;
        }
        EventSummary es;
        es.name = specs_[e].name;
        es.samples = c.events[e].samples;
        es.lost = c.events[e].lost;
        es.lost_samples = event_lost_samples_[e];
        s.kernel_lost += es.kernel_lost();
        s.events.push_back(es);
    }
    s.lost_samples = lost_samples_;
    s.synthesized_records = synth_.records;
    return s;
}

}  // namespace

int run_record(const RecordOptions& opts, std::ostream& log, RecordSummary* summary) {
    RecordSummary local;
    OutputFile::check_path(opts.output);
    PerfTarget target = PerfTarget::from_options(opts);
    // Stop sources first: the command is forked now and held until the events are ready.
    SignalBlock signals;
    std::unique_ptr<Command> command;
    if (!opts.command.empty()) {
        command = std::make_unique<Command>(opts.command, signals);
        if (target.per_task) target.tids = {command->pid()};
    }
    PerfSource source(opts.events, std::move(target));
    return Session(opts, log, signals, command.get()).run(source, summary ? *summary : local);
}

int run_record(const RecordOptions& opts, RingSource& source, std::ostream& log, RecordSummary* summary) {
    RecordSummary local;
    OutputFile::check_path(opts.output);
    SignalBlock signals;
    return Session(opts, log, signals, nullptr).run(source, summary ? *summary : local);
}

}  // namespace ringcap
