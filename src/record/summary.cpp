#include <iomanip>
#include <ostream>
#include <sstream>

#include "ringcap/recorder.hpp"

namespace ringcap {

std::string human_bytes(uint64_t b) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(2);
    if (b >= (1ull << 30)) s << double(b) / double(1ull << 30) << " GiB";
    else if (b >= (1ull << 20)) s << double(b) / double(1ull << 20) << " MiB";
    else if (b >= (1ull << 10)) s << double(b) / double(1ull << 10) << " KiB";
    else s << b << " B";
    return s.str();
}

void print_summary(const RecordSummary& s, std::ostream& log) {
    std::ostringstream o;  // one write to stderr
    o << "ringcap: stopped (" << s.stop_reason << ") after " << std::fixed << std::setprecision(2) << s.seconds
      << " s\n";
    o << "  cpu         bytes    records    samples  lost-recs       lost  throttled   wakeups\n";
    for (const auto& c : s.cpus) {
        o << "  " << std::setw(3) << c.cpu << std::setw(14) << c.ring.bytes << std::setw(11) << c.ring.records
          << std::setw(11) << c.ring.samples << std::setw(11) << c.ring.lost_records << std::setw(11) << c.ring.lost
          << std::setw(11) << c.ring.throttles << std::setw(10) << c.wakeups << (c.hung_up ? "  hung up" : "");
        if (c.went_offline)
            o << "  offline " << c.went_offline << "x, reopened " << c.reopened << "x" << (c.offline ? ", offline at the end" : "");
        o << "\n";
    }
    o << "  all" << std::setw(14) << s.total.bytes << std::setw(11) << s.total.records << std::setw(11)
      << s.total.samples << std::setw(11) << s.total.lost_records << std::setw(11) << s.total.lost << std::setw(11)
      << s.total.throttles << std::setw(10) << s.cqes << "\n";
    for (const auto& e : s.events)
        o << "  event " << e.name << ": samples " << e.samples << ", kernel-lost " << e.kernel_lost()
          << (e.dropped ? ", dropped " + std::to_string(e.dropped) : "") << "\n";
    if (s.tracking_lost) o << "  tracking event: kernel-lost " << s.tracking_lost << " records\n";
    if (s.collectors.size() > 1) {
        o << "  collector  rings    cpu_s      bytes\n";
        for (size_t i = 0; i < s.collectors.size(); ++i)
            o << "  " << std::setw(9) << i << std::setw(7) << s.collectors[i].rings << std::setw(9) << std::fixed
              << std::setprecision(3) << s.collectors[i].cpu_seconds << std::setw(11) << s.collectors[i].bytes << "\n";
    }
    const double mb = double(s.file_bytes) / 1e6;
    o << "ringcap: wrote " << std::setprecision(3) << mb << " MB to ";
    if (s.files.size() > 1) o << s.files.size() << " files ('" << s.files.front() << "' ... '" << s.files.back() << "', ";
    else if (s.files.empty() && s.flight) o << "no file (the flight recorder wrote no dump; ";
    else o << "'" << (s.files.empty() ? s.path : s.files.front()) << "' (";
    o
      << (s.o_direct ? "O_DIRECT" : "buffered") << ", " << s.writes << " writes";
    if (s.preallocations)
        o << ", preallocated in " << s.preallocations << " steps, " << s.writes_beyond_allocation << " writes beyond";
    o << ", " << std::setprecision(1)
      << (s.seconds > 0 ? mb / s.seconds : 0.0) << " MB/s), " << s.rounds << " rounds; " << s.backend << ": "
      << s.cqes << " ring wake-ups, " << s.rearms << " re-arms, " << s.waits << " waits\n";
    if (s.compression_level > 0) {
        const double ratio = s.compressed_bytes ? double(s.compress_input) / double(s.compressed_bytes) : 0.0;
        o << "ringcap: compressed " << std::setprecision(3) << double(s.compress_input) / 1e6 << " MB to "
          << double(s.compressed_bytes) / 1e6 << " MB (" << std::setprecision(1) << ratio << "x, zstd level "
          << s.compression_level << ") in " << s.compressed_records << " COMPRESSED records, "
          << std::setprecision(3) << s.compress_cpu_seconds << " s CPU compressing";
        if (s.compressed_chunked) o << "; " << s.compressed_chunked << " buffers compressed poorly (one block per record)";
        o << "\n";
    }
    o << "ringcap: samples=" << s.total.samples << " records=" << s.total.records << " lost=" << s.kernel_lost
      << " lost_records=" << s.total.lost_records << " cqes=" << s.cqes << " rearms=" << s.rearms
      << " hangups=" << s.hangups << " bytes=" << s.file_bytes << " staging_full=" << s.total.partial_drains
      << " throttled=" << s.total.throttles << " dropped=" << s.total.dropped << " cut=" << s.total.cut;
    if (s.compression_level > 0)
        o << " compressed_in=" << s.compress_input << " compressed_out=" << s.compressed_bytes
          << " compressed_records=" << s.compressed_records << " compress_cpu_s=" << std::setprecision(3)
          << s.compress_cpu_seconds;
    o << "\n";
    if (!s.command_status.empty()) o << "ringcap: the command " << s.command_status << "\n";
    const uint64_t lost = s.kernel_lost, samples_lost = lost - s.tracking_lost;
    if (lost > 0) {
        o << "ringcap: WARNING: the kernel dropped " << samples_lost << " sample(s) (" << std::setprecision(2)
          << 100.0 * double(samples_lost) / double(samples_lost + s.total.samples) << " %)";
        if (s.tracking_lost)
            o << " and " << s.tracking_lost << " process/mapping record(s), so some names and symbols may be missing";
        o << ": the rings filled faster than they were drained. Use a bigger ring (-m), a lower rate (-F), "
             "or fewer events";
        if (!s.collector_realtime && !s.collector_realtime_refused.empty())
            o << "; with every CPU busy the collector also waits its turn: it was not real-time ("
              << s.collector_realtime_refused << ") and ran at nice " << s.collector_nice;
        else if (!s.collector_realtime && !s.collector_nice_refused.empty())
            o << "; with every CPU busy the collector also waits its turn: it ran at nice " << s.collector_nice << ", not "
              << kDefaultCollectorNice << " (" << s.collector_nice_refused << ")";
        o << ".\n";
    }
    if (s.pressure.any()) {
        // What back-pressure did, mildest first, and what would have spared it.
        const PressureStats& p = s.pressure;
        o << "ringcap: back-pressure (what follows the rings fell behind them):";
        const char* sep = " ";
        if (p.faster_zstd) o << sep << "zstd level lowered " << p.faster_zstd << " time(s) (to " << p.fastest_zstd << ")", sep = "; ";
        if (p.shorter_stacks)
            o << sep << s.total.cut << " sample(s) with their user stack cut (to " << p.shortest_cut << " bytes at the shortest)",
                sep = "; ";
        if (p.slowed)
            o << sep << "sampling frequency lowered " << p.slowed << " time(s) (to 1/" << (1u << p.worst_rate_shift)
              << " at the lowest; each sample carries its period)",
                sep = "; ";
        if (p.drops) o << sep << s.total.dropped << " sample(s) dropped (counted as lost in the file)", sep = "; ";
        if (p.period_errors) o << sep << p.period_errors << " frequency change(s) refused by the kernel";
        o << ". A faster disk, more staging (--staging-buffers), -z, or a lower rate (-F) or stack size "
             "(--call-graph dwarf,SIZE) avoid it; --no-cut-samples keeps stacks whole.\n";
    }
    if (s.total.throttles > 0)
        o << "ringcap: WARNING: the kernel throttled sampling " << s.total.throttles
          << " time(s) (kernel.perf_cpu_time_max_percent): no samples were taken while throttled. Use a lower "
             "rate (-F).\n";
    if (lost > 0 && s.total.partial_drains > 0) {
        o << "ringcap: " << s.total.partial_drains << " ring drain(s) stopped early on full staging: the output "
             "could not keep up; more staging (--staging-buffers) rides out slow writes";
        if (s.compression_level > 0)
            o << ". With -z the encoder may be what falls behind (its CPU is above): --threads N compresses on N "
                 "CPUs, a lower level (-z1) costs less";
        o << ".\n";
    }
    for (const auto& c : s.cpus)
        if (c.went_offline)
            o << "ringcap: cpu " << c.cpu << " went offline " << c.went_offline << " time(s) during the record"
              << (c.reopened ? "; its events were opened again when it came back" : "")
              << (c.offline ? "; it is offline at the end" : "") << ": nothing was recorded on it while it was offline\n";
    if (s.total.bad_headers > 0)
        o << "ringcap: WARNING: " << s.total.bad_headers << " malformed record header(s) seen in the rings\n";
    if (s.refused_bytes > 0) {
        o << "ringcap: WARNING: " << human_bytes(s.refused_bytes) << " read from the rings were not written ";
        if (s.refused_compressed) o << "(" << s.refused_compressed << " compressed records)";
        else o << "(" << s.refused_samples << " samples)";
        o << ": the file reached --max-size before the record stopped; the rings and staging hold more than the "
             "room left below it (raise --max-size, or lower -m)\n";
    }
    log << o.str() << std::flush;
}

}  // namespace ringcap
