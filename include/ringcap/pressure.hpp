// Graded back-pressure: what a collector does when what follows its rings (staging, the encoder,
// the disk) is slower than the kernel fills them, instead of letting the kernel drop whole samples.
//
// One signal, headroom: the free fraction of the collector's staging (a buffer that waits for the
// encoder or is being written is not free; with -z the lower of the input staging's and the encoded
// buffers'), taken after every pass. A ladder of grades, mildest first:
//   -z:      a faster zstd level (1, then -1, then -5: valid zstd that perf decodes)
//   dwarf:   user stacks cut to 4096, then 2048, then 1024 bytes (simpleperf cuts to 1 KiB)
//   then, only while headroom stays low for kSustained: the sampling frequency halved, up to 1/8
//            (PERF_EVENT_IOC_PERIOD; every sample carries its period, so perf report stays unbiased)
//   last:    samples dropped (counted), never MMAP/MMAP2/COMM/FORK/EXIT/LOST/THROTTLE records, from
//            when headroom is almost gone (kDropBelow) whatever else is engaged, until there is room
//            again (kDropUntil): the kernel would drop whole records of every kind instead, the
//            process and mapping records among them
// A grade is engaged when headroom falls below its level (every such grade at once, the lower
// frequencies one at a time), and undone, one at a time and in reverse order, once headroom has
// stayed above that level plus a margin for kRelease. A grade that has to come back soon after it
// was undone (within kFlapWindow) waits twice as long before it is undone again, up to
// kMaxRelease: an output that only keeps up at that grade would otherwise swing in and out of it,
// and each swing fills staging again from a lower start. Pure logic: the collector applies what
// grade() says (readers, encoder, event periods) and counts it. The ring
// holds samples whole while it can: cuts apply to a ring more than half full (to every sample from
// the shortest cut on: Grade::cut_all), drops to the samples of a ring more than three quarters full
// that find no room in staging (Collector::pass).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringcap {

struct PressureConfig {
    int zstd_level = 0;       // -z's level (0: not compressed)
    uint32_t stack_dump = 0;  // the largest user-stack dump of the events (0: no dwarf stacks)
    bool cut = true;          // stacks may be cut (--no-cut-samples: no)
    bool slow = true;         // the frequency may be lowered (events in frequency mode)
};

// What the collector does at one grade.
struct Grade {
    int zstd_level = 0;       // the level to compress at now (0: not compressed)
    uint32_t cut_bytes = 0;   // user stacks cut to this (0: not cut)
    unsigned rate_shift = 0;  // the sampling frequency divided by 2^rate_shift
    bool drop = false;        // samples dropped
    // Every sample cut, not only those of a ring more than half full: from the shortest cut on,
    // the output is slower than the rings for good, and whole samples would fill staging again
    // until samples are dropped (a disk throttled to 200 MB/s dropped 20,000-57,000 per 3 s at
    // 40 kHz dwarf while cutting only in the upper half of the rings; 0 when cutting all).
    bool cut_all = false;
    bool operator==(const Grade&) const = default;
};

class PressureGrader {
public:
    using Clock = std::chrono::steady_clock;
    static constexpr auto kSustained = std::chrono::milliseconds(500);  // before a lower frequency
    static constexpr auto kRelease = std::chrono::seconds(1);           // above the level before undoing it
    static constexpr auto kMaxRelease = std::chrono::seconds(16);      // the longest that wait grows to
    static constexpr auto kFlapWindow = std::chrono::seconds(4);       // back this soon: the wait doubles
    static constexpr double kMargin = 0.2;                              // of headroom, above the level
    static constexpr double kDropBelow = 0.03;  // headroom at which samples go, and until which they do
    static constexpr double kDropUntil = 0.15;

    explicit PressureGrader(const PressureConfig& cfg);

    // Headroom now (0: staging full .. 1: all free). True when the grade changed.
    bool update(double headroom, Clock::time_point now);

    Grade grade() const {
        Grade g = ladder_[level_];
        g.drop = dropping_;
        return g;
    }
    // What grade `level` does (without the drop, which comes and goes on its own).
    const Grade& grade_at(size_t level) const { return ladder_.at(level); }
    bool dropping() const { return dropping_; }
    size_t level() const { return level_; }
    size_t levels() const { return ladder_.size(); }
    // The headroom below which grade `level` engages (level 0 is never engaged: it is the normal one).
    double threshold(size_t level) const { return thresholds_[level]; }
    // "zstd -1", "stacks cut to 2048 bytes", "frequency / 4": for -v and the summary.
    std::string describe(size_t level) const;
    // Times each grade was engaged, and dropping.
    const std::vector<uint64_t>& engaged() const { return engaged_; }
    uint64_t drops_engaged() const { return drops_engaged_; }
    // The highest grade reached.
    size_t worst() const { return worst_; }
    // How long headroom must stay high before grade `level` is undone (kRelease, doubled by flaps).
    Clock::duration release_after(size_t level) const { return release_[level]; }

private:
    std::vector<Grade> ladder_;
    std::vector<double> thresholds_;
    std::vector<uint64_t> engaged_;
    std::vector<Clock::duration> release_;     // per grade: the wait before it is undone
    std::vector<Clock::time_point> undone_at_;  // per grade: when it was last undone ({}: never)
    size_t level_ = 0, worst_ = 0;
    Clock::time_point below_since_{}, above_since_{};
    bool below_ = false, above_ = false, dropping_ = false;
    uint64_t drops_engaged_ = 0;
};

}  // namespace ringcap
