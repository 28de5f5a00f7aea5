// The record session's phases: plan -> open the source -> collectors -> output -> what already runs
// -> start -> (session_loop.cpp) -> (session_end.cpp) stop -> finish.
#include "session.hpp"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <sys/eventfd.h>
#include <sys/wait.h>

#include "ringcap/build_id_cache.hpp"
#include "ringcap/process.hpp"
#include "ringcap/records.hpp"

namespace ringcap {

namespace {

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

}  // namespace

Session::Session(const RecordOptions& o, std::ostream& log, SignalBlock& signals, Command* command)
    : opts_(o), log_(log), signals_(signals), command_(command), per_task_(per_task(o)) {}

Session::~Session() = default;

std::vector<AttrEntry> Session::attr_entries(const std::vector<perf_event_attr>& attrs) const {
    std::vector<AttrEntry> entries(specs_.size());
    for (size_t e = 0; e < entries.size(); ++e) {
        entries[e].attr = attrs[e];
        entries[e].name = specs_[e].name;
    }
    for (const auto& ring : source_->rings())
        for (const auto& ev : ring.events) entries[ev.event_index].ids.push_back(ev.id);
    return entries;
}

namespace {

// The user-stack dump size of an event's samples if it is their last field (see
// RingReader::set_stacks), else 0.
uint32_t stack_dump_at_end(const perf_event_attr& a) {
    // Fields laid out after STACK_USER: the higher bits, except IDENTIFIER, which comes first.
    const uint64_t after = ~(uint64_t(PERF_SAMPLE_STACK_USER) * 2 - 1) & ~uint64_t(PERF_SAMPLE_IDENTIFIER);
    if (!(a.sample_type & PERF_SAMPLE_STACK_USER) || (a.sample_type & after)) return 0;
    return (a.sample_stack_user + 7) & ~7u;
}

}  // namespace

void Session::start_collectors(const RecordPlan& plan, const std::vector<perf_event_attr>& attrs) {
    // The rings split among collectors (--threads; by default one per CPU), each on a thread of its
    // own pinned near its rings. One collector for all of them (--threads 1) runs anywhere: with the
    // CPUs busy, pinning it only takes away the scheduler's choice.
    const auto rings = source_->rings();
    std::vector<int> cpus;
    for (const auto& r : rings) cpus.push_back(r.cpu);
    const std::vector<int> online = online_cpus();
    const auto sizes = split_rings(opts_.threads, cpus);
    const int inherited_nice = thread_nice();
    const bool inherited_rt = realtime_thread();
    size_t first = 0;
    for (size_t n : sizes) {
        CollectorThread::Setup s;
        s.config.loop = plan.loop();
        s.config.loop.rings = unsigned(n);
        // Staging shared out in proportion to the rings, at least 4 buffers each.
        s.config.staging_buffers = std::max<size_t>(4, plan.staging_buffers() * n / rings.size());
        s.config.loop.writes_in_flight = unsigned(s.config.staging_buffers);
        s.config.staging_buffer_bytes = plan.staging_buffer_bytes();
        staging_buffer_bytes_ = plan.staging_buffer_bytes();
        s.config.events = specs_.size();
        s.config.dsos = opts_.build_ids ? &dsos_ : nullptr;
        s.config.sideband = flight() || rotating() ? &sideband_inbox_ : nullptr;
        // The status line shows each second's figures; a window moves by the second.
        if (opts_.live_status || flight()) s.config.quiet_tick_seconds = 0;
        rounds_tick_ = s.config.quiet_tick_seconds > s.config.tick_seconds;
        // The real-time default gives way, as the nice default does, to a priority ringcap was
        // started with (nice, systemd's Nice=, chrt): the collectors keep that one.
        // So does --collector-nice: a priority chosen for them replaces the default.
        s.config.realtime_priority =
            opts_.realtime_given || (inherited_nice == 0 && !inherited_rt && !opts_.collector_nice_given)
                ? opts_.realtime_priority
                : 0;
        s.config.realtime_required = opts_.realtime_given;
        // The default gives way to a priority ringcap was started with (nice, systemd's Nice=): the
        // collectors keep that one.
        s.config.nice = opts_.collector_nice_given || inherited_nice == 0 ? opts_.collector_nice : 0;
        s.config.nice_required = opts_.collector_nice_given;
        s.config.compression_level = opts_.compression_level;
        if (opts_.stack_trim)
            for (const auto& a : attrs) s.config.stack_dumps.push_back(stack_dump_at_end(a));
        // Back-pressure: what may be lowered, per event (the tracking event samples nothing).
        s.config.pressure_off = !opts_.back_pressure;
        s.config.pressure.zstd_level = opts_.compression_level;
        s.config.pressure.cut = opts_.cut_samples;
        s.config.pressure.slow = false;
        s.config.verbose = opts_.verbose > 0;
        s.config.write_fault = opts_.write_fault;
        for (size_t e = 0; e < attrs.size(); ++e) {
            s.config.pressure.stack_dump = std::max(s.config.pressure.stack_dump, stack_dump_at_end(attrs[e]));
            const bool freq = attrs[e].freq && !(e < specs_.size() && specs_[e].tracking);
            s.config.sample_freqs.push_back(freq ? attrs[e].sample_freq : 0);
            s.config.period_in_ns.push_back(attrs[e].type == PERF_TYPE_SOFTWARE &&
                                            (attrs[e].config == PERF_COUNT_SW_CPU_CLOCK ||
                                             attrs[e].config == PERF_COUNT_SW_TASK_CLOCK));
            s.config.pressure.slow |= freq;
        }
        s.rings = rings.subspan(first, n);
        s.first_ring = first;
        if (sizes.size() > 1)
            for (size_t i = first; i < first + n; ++i)
                if (std::find(online.begin(), online.end(), cpus[i]) != online.end()) s.cpus.push_back(cpus[i]);
        s.file = &output_->file();
        s.space = space_.get();
        s.log = &log_;
        s.done_fd = done_fd_.get();
        collectors_.push_back(std::make_unique<CollectorThread>(std::move(s)));
        first += n;
    }
    // A collector's allocation done: the others may be holding writes for it (FileSpace::allocating).
    if (collectors_.size() > 1)
        space_->on_allocated([this] {
            for (auto& c : collectors_) c->wake();
        });
    if (!collectors_.front()->fallback_reason().empty())
        log_ << "ringcap: io_uring unavailable, using epoll: " << collectors_.front()->fallback_reason() << "\n";
}

int Session::run(RingSource& source, RecordSummary& sum) {
    // SIGUSR2 switches files with --switch-output (signal), and is ignored otherwise, as perf does.
    // Blocked before any thread starts: they inherit the mask.
    signals_.watch(SIGUSR2);
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
    if (source.follows_cpus()) uevents_ = CpuUevents::open();

    // 3. The output under a temporary name, its space allocated ahead; 4. the collectors, armed on
    // their threads (-r applies to them), before the file replaces anything.
    if (!opts_.control.empty()) control_ = ControlChannel(opts_.control);
    if (pipe_fd_ >= 0) output_ = make_pipe_output(plan.staging_buffer_bytes(), attrs);
    else if (flight()) output_ = std::make_unique<WindowOutput>(attr_entries(attrs));
    else output_ = std::make_unique<FileOutput>(opts_.output, opts_.allow_direct, attr_entries(attrs));
    // --max-size: what may still arrive once the record decides to stop. A quarter of each ring (the
    // default wake-up watermark: a collector that keeps up drains a ring there), and a few staging
    // buffers per collector (filled, not yet queued; those being written have their place already).
    // Beyond that the hard limit refuses buffers and counts what they held.
    for (const auto& r : source.rings()) headroom_ += r.ring.mapped_bytes() / 4;
    headroom_ += 4 * uint64_t(plan.staging_buffer_bytes()) * std::max<size_t>(1, split_rings(opts_.threads, std::vector<int>(source.rings().size())).size());
    done_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!done_fd_) throw Error("eventfd: " + errno_text(errno));
    space_ = make_space(*output_);
    start_collectors(plan, attrs);
    if (opts_.verbose) print_setup(plan, ring_pages);

    // 5. What already runs, written first and made durable with its header. Setup succeeded: only
    // now is an existing output touched (perf keeps one .old), and the file is valid from here on.
    write_start();

    // 6. Start; --duration counts from here (with many CPUs, enabling every event takes a while).
    const auto enable_start = Clock::now();
    source.enable();
    t0_ = Clock::now();
    if (opts_.verbose)
        log_ << "ringcap: events enabled in " << std::fixed << std::setprecision(1)
             << std::chrono::duration<double, std::milli>(t0_ - enable_start).count() << " ms\n";
    if (opts_.duration_s > 0)
        deadline_ = t0_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.duration_s));
    for (auto& c : collectors_) c->start();
    if (command_) command_->start();
    last_status_ = t0_;
    file_started_ = t0_;

    // 7. Until a stop source fires, every ring hung up, or a write failed; 8. stop; 9. finish.
    wait_for_stop();
    stop();
    finish();
    if (flight()) {
        FlightSummary f;
        f.duration_s = opts_.flight_recorder_s;
        f.bound = window_bound();
        f.window_seconds = window_end_.first;
        f.window_bytes = window_end_.second;
        f.shrunk = window_shrunk_;
        for (const auto& d : dumps_)
            f.dumps.push_back({d.path, d.trigger, d.data_bytes, d.window_seconds, d.start_time, d.end_time, d.samples->load()});
        sum.flight = std::move(f);
    }

    static_cast<RecordSnapshot&>(sum) = snapshot();
    sum.path = opts_.output;
    sum.backend = collectors_.front()->backend();
    sum.collector_nice = collectors_.front()->nice();
    sum.collector_nice_refused = collectors_.front()->nice_refused();
    sum.collector_realtime = collectors_.front()->realtime();
    sum.collector_realtime_refused = collectors_.front()->realtime_refused();
    sum.stop_reason = stop_reason_;
    sum.error = error_;
    sum.file_bytes = file_bytes_;
    sum.unwritten_bytes = unwritten_bytes_;
    sum.files = rotating() || flight() ? files_ : std::vector<std::string>{opts_.output};
    if (!files_.empty()) sum.path = files_.back();
    sum.o_direct = output_->file().o_direct();
    sum.compression_level = opts_.compression_level;
    bool failed = write_error_ != 0 || rotation_failed_ || dumps_failed_ || !output_->error().empty();
    for (const auto& c : collectors_) {
        failed |= c->cause() == StopCause::WriteError;
        sum.collectors.push_back({c->rings(), c->cpu_seconds(), c->snapshot().writer.bytes});
    }
    sum.exit_code = failed ? 1 : 0;
    if (command_) {
        const CommandOutcome c = command_->finish();
        sum.command_status = c.what;
        // As perf record: the command's own failure is the record's exit status, if the record succeeded.
        if (sum.exit_code == 0) sum.exit_code = c.exit_code;
    }
    print_summary(sum, log_);
    return sum.exit_code;
}

void Session::print_setup(const RecordPlan& plan, size_t ring_pages) const {
    size_t events = 0;
    for (const auto& sp : specs_) events += sp.tracking ? 0 : 1;
    const size_t rings = source_->ring_count();
    log_ << "ringcap: backend " << collectors_.front()->describe() << "; " << collectors_.size()
         << " collector(s) polling " << rings << " ring owner fd(s), ";
    const auto& c = *collectors_.front();
    if (c.realtime()) log_ << "SCHED_FIFO priority " << c.realtime() << "\n";
    else if (!c.realtime_refused().empty() && c.nice_refused().empty())
        log_ << "nice " << c.nice() << " (not real-time: " << c.realtime_refused() << ")\n";
    else if (c.nice_refused().empty())
        log_ << "nice " << c.nice()
             << (!opts_.collector_nice_given && c.nice() != opts_.collector_nice ? " (ringcap's own, which the default gives way to)" : "")
             << "\n";
    else
        log_ << "nice " << c.nice() << ": " << c.nice_refused()
             << (c.realtime_refused().empty() ? "" : "; not real-time: " + c.realtime_refused()) << "\n";
    log_
         << "ringcap: " << rings << " ring(s) of " << ring_pages << " data pages ("
         << human_bytes(ring_pages * page_size()) << ") for " << events << " event(s), " << source_->describe() << "\n"
         << "ringcap: staging " << plan.staging_buffers() << " x " << human_bytes(plan.staging_buffer_bytes())
         << " (4 KiB aligned, shared out among the collectors), output '" << opts_.output << "' "
         << (output_->file().o_direct() ? "O_DIRECT" : "buffered (O_DIRECT refused or disabled)")
         << (space_->preallocating() ? ", preallocated ahead" : "") << ", data at offset " << output_->data_offset()
         << "\n";
    if (flight())
        log_ << "ringcap: flight recorder: the newest " << opts_.flight_recorder_s << " s kept in memory, compressed (at most "
             << human_bytes(window_bound()) << "); written to " << opts_.output << ".<time> on SIGUSR2"
             << (opts_.control.empty() ? "" : ", the control command snapshot") << " and at the end"
             << (opts_.flight_recorder_on_failure ? " if the command failed" : "") << "\n";
}

void Session::write_own(std::vector<std::byte>& bytes, bool pad) {
    // The session's own records, at offsets reserved like the collectors' buffers; padded to 4 KiB
    // when more data follows.
    if (pad) append_padding(bytes, (kStagingAlign - bytes.size() % kStagingAlign) % kStagingAlign);
    if (!bytes.empty()) write_reserved(bytes.data(), bytes.size());
}

uint64_t Session::write_records(std::vector<std::byte>& bytes, uint64_t* at) {
    const bool anchor = opts_.compression_level > 0;
    size_t pad = (kStagingAlign - bytes.size() % kStagingAlign) % kStagingAlign;
    if (anchor && pad < kAnchorBytes) pad += kStagingAlign;
    const size_t records = bytes.size(), len = records + pad;
    const uint64_t offset = space_->reserve(len);
    if (at) *at = offset;
    if (anchor) {
        const auto a = compression_anchor(offset + records, pad, compression_feature(nullptr));
        bytes.insert(bytes.end(), a.begin(), a.end());
    } else {
        append_padding(bytes, pad);
    }
    // One 4 KiB block (a round marker) goes out O_DIRECT from aligned memory.
    struct alignas(kStagingAlign) Block {
        std::byte bytes[kStagingAlign];
    };
    static thread_local Block block;
    const bool small = len == sizeof block.bytes;
    if (small) std::memcpy(block.bytes, bytes.data(), len);
    if (const int err = output_->write_block(offset, small ? block.bytes : bytes.data(), len)) {
        if (!write_error_) write_error_ = err;
        return 0;
    }
    if (anchor) anchors_.emplace_back(offset + records, offset + len);
    return offset + len;
}

uint64_t Session::crash_safe_end() {
    const uint64_t durable = durable_end();
    if (opts_.compression_level == 0) return durable;
    while (anchors_.size() > 1 && anchors_[1].second <= durable) anchors_.pop_front();
    return anchors_.empty() ? output_->data_offset() : anchors_.front().first;
}

CompressionFeature Session::compression_feature(const RecordSnapshot* s) const {
    CompressionFeature c;
    c.level = uint32_t(opts_.compression_level);
    // A record decompresses to at most one staging buffer (perf adds what a record left unfinished).
    c.mmap_len = uint32_t(staging_buffer_bytes_);
    if (s && s->compressed_bytes > 0) c.ratio = uint32_t(std::max<uint64_t>(1, s->compress_input / s->compressed_bytes));
    return c;
}

uint64_t Session::write_reserved(const void* p, size_t len) {
    const uint64_t offset = space_->reserve(len);
    if (const int err = output_->write_block(offset, p, len)) {
        if (!write_error_) write_error_ = err;
        return 0;
    }
    return offset + len;
}

void Session::write_start() {
    // The tracking event starts before the /proc scan, so nothing that starts meanwhile is missed
    // (a duplicate is harmless).
    source_->start_tracking();
    write_start_records();
    round_data_ = space_->end();  // their time is 0: no round marker needed after them (as at a switch)
    if (write_error_)
        throw Error("cannot write the start of '" + opts_.output + "': " + errno_text(write_error_) +
                    write_error_hint(write_error_));
    // --max-size: now that the mapped files are known, the room their build-ids take. (A flight
    // recorder's window is not the file: its dumps keep to --max-size each, see dump().)
    if (opts_.max_size && !flight()) limit_space(*space_, *output_);
    // The streamer runs with the collectors: at their nice, or at the nice their encoders get when
    // they are real-time (it must never be).
    if (pipe_fd_ >= 0) {
        const auto& c = *collectors_.front();
        static_cast<PipeOutput&>(*output_).set_stream_nice(c.realtime() ? opts_.collector_nice : c.nice());
    }
    publish_output();
    if (!synth_.kernel_scanned) return;  // the source describes no real processes
    if (opts_.verbose)
        log_ << "ringcap: synthesized " << synth_.threads << " threads of " << synth_.processes << " processes, "
             << synth_.maps << " executable maps" << (synth_.kernel_map ? ", the kernel map" : "") << " ("
             << human_bytes(synth_.bytes) << ") in " << std::fixed << std::setprecision(3) << synth_.seconds << " s\n";
    if (!synth_.kernel_map)
        log_ << "ringcap: /proc/kallsyms hides kernel addresses (kernel.kptr_restrict): kernel samples will not "
                "resolve to symbols\n";
}

void Session::write_start_records(bool next_file) {
    std::vector<std::byte> start;
    std::vector<MappedFile> maps;
    TaskSet present;  // the threads the scan found
    const RecordSink sink = [&](const void* rec, size_t n) {
        perf_event_header h;
        std::memcpy(&h, rec, sizeof h);
        if (h.type == PERF_RECORD_COMM) {
            CommBody b;
            std::memcpy(&b, static_cast<const char*>(rec) + field::kBody, sizeof b);
            present.emplace(b.pid, b.tid);
        }
        if (opts_.build_ids && h.type == PERF_RECORD_MMAP2 && !(h.misc & PERF_RECORD_MISC_MMAP_DATA)) {
            Mmap2Body b;
            std::memcpy(&b, static_cast<const char*>(rec) + field::kBody, sizeof b);
            maps.push_back({b.pid, b.addr, b.addr + b.len, b.maj, b.min, b.ino, true,
                            static_cast<const char*>(rec) + field::kMmap2Filename});
        }
        const auto* b = static_cast<const std::byte*>(rec);
        start.insert(start.end(), b, b + n);
    };
    source_->synthesize(sink, synth_);
    bpf_seen_.merge(read_bpf_info());  // as perf synthesizes the programs loaded at the start
    dsos_.add_mappings(maps);
    if (rotating()) carry_tasks(start, present, next_file);
    const perf_event_header init{kRecordFinishedInit, 0, sizeof(perf_event_header)};  // as perf: the start is complete
    sink(&init, sizeof init);
    if (flight()) {
        keep_start_records(start);  // every dump starts with them (the window does not)
        return;
    }
    if (opts_.compression_level > 0) output_->set_crash_features(kAnchorFeatures);
    write_records(start);
}

}  // namespace ringcap
