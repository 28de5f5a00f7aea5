// The collector's side of graded back-pressure (pressure.hpp): the headroom after each pass, and
// what the grade says applied to the ring readers (stacks cut, samples dropped), the encoder (its
// zstd level) and the events (their sampling frequency). Nothing here runs per record.
#include <algorithm>
#include <cerrno>
#include <iomanip>
#include <linux/perf_event.h>
#include <ostream>
#include <sstream>
#include <sys/ioctl.h>

#include "ringcap/collector.hpp"

namespace ringcap {

double Collector::headroom() const {
    // A buffer that waits for the encoder or is being written is not free: one number covers staging,
    // the encoder's backlog and the writes in flight.
    auto free_of = [](const StagingPool& p) { return double(p.free_bytes()) / double(p.count() * p.buffer_size()); };
    double h = free_of(*staging_);
    if (encoded_) h = std::min(h, free_of(*encoded_));
    return h;
}

bool Collector::grade_pass() {
    const double h = headroom();
    pressure_.headroom = h;
    if (!grader_->update(h, PressureGrader::Clock::now())) return false;
    apply_grade(grader_->grade());
    return true;
}

void Collector::apply_grade(const Grade& g) {
    const Grade was = applied_;
    if (g.cut_bytes != was.cut_bytes || g.drop != was.drop)
        for (auto& r : rings_)
            if (!r.released) r.reader.set_shaping(g.cut_bytes, g.drop);
    if (encoder_ && g.zstd_level != was.zstd_level) encoder_->set_level(g.zstd_level);
    if (g.rate_shift != was.rate_shift) set_rate(g.rate_shift);
    // Counted as they engage; the strongest one reached is kept for the summary.
    if (g.zstd_level < was.zstd_level) ++pressure_.faster_zstd;
    if (g.cut_bytes && (!was.cut_bytes || g.cut_bytes < was.cut_bytes)) ++pressure_.shorter_stacks;
    if (g.rate_shift > was.rate_shift) ++pressure_.slowed;
    if (g.drop && !was.drop) ++pressure_.drops;
    if (g.zstd_level && (!pressure_.fastest_zstd || g.zstd_level < pressure_.fastest_zstd))
        pressure_.fastest_zstd = g.zstd_level;
    if (g.cut_bytes && (!pressure_.shortest_cut || g.cut_bytes < pressure_.shortest_cut)) pressure_.shortest_cut = g.cut_bytes;
    pressure_.worst_rate_shift = std::max(pressure_.worst_rate_shift, g.rate_shift);
    if (grader_->level() >= grader_->worst()) pressure_.worst = grader_->describe(grader_->level());
    applied_ = g;
    if (verbose_) {
        std::ostringstream line;  // one write: other threads print too
        line << "ringcap: back-pressure on cpu";
        for (size_t i = 0; i < rings_.size(); ++i) line << (i ? "," : " ") << rings_[i].src->cpu;
        const bool stronger = grader_->level() > applied_level_ || (g.drop && !was.drop);
        line << ": " << (stronger ? "now " : "eased to ") << grader_->describe(grader_->level())
             << (g.drop ? ", samples dropped" : "") << " (staging " << std::fixed << std::setprecision(0)
             << 100 * pressure_.headroom << " % free)\n";
        log_ << line.str() << std::flush;
    }
    applied_level_ = grader_->level();
}

void Collector::set_rate(unsigned shift) {
    // In frequency mode PERF_EVENT_IOC_PERIOD sets the frequency, except for the hrtimer events
    // (cpu-clock, task-clock), which the kernel turned into a period in nanoseconds at open: for
    // them it sets that period. Every sample carries its period (PERF_SAMPLE_PERIOD), so perf report
    // weighs the slower ones right.
    for (auto& r : rings_) {
        if (r.released) continue;
        for (const auto& ev : r.src->events) {
            const size_t e = ev.event_index;
            const uint64_t f = e < sample_freqs_.size() ? sample_freqs_[e] : 0;
            if (f == 0) continue;
            const bool ns = e < period_in_ns_.size() && period_in_ns_[e];
            uint64_t v = ns ? (1'000'000'000 / f) << shift : std::max<uint64_t>(1, f >> shift);
            if (::ioctl(ev.fd.get(), PERF_EVENT_IOC_PERIOD, &v) != 0) ++pressure_.period_errors;
        }
        // The hrtimer events' samples keep saying their first period: from here on the reader
        // writes the new one into them (the ioctl stopped and restarted each event: everything
        // below the head now was sampled before).
        r.reader.change_period(r.reader.head(), shift);
    }
}

}  // namespace ringcap
