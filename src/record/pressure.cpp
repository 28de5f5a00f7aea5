#include "ringcap/pressure.hpp"

#include <algorithm>

namespace ringcap {

namespace {
// Headroom below which the first grade engages, and the last one.
constexpr double kFirstBelow = 0.25, kLastBelow = 0.08;
}  // namespace

PressureGrader::PressureGrader(const PressureConfig& cfg) {
    Grade g;
    g.zstd_level = cfg.zstd_level;
    ladder_.push_back(g);
    if (cfg.zstd_level >= 1) {
        // Faster levels first: each is cheaper per byte than cutting what there is to compress.
        for (int level : {1, -1, -5})
            if (level < g.zstd_level) {
                g.zstd_level = level;
                ladder_.push_back(g);
            }
    }
    if (cfg.cut && cfg.stack_dump > 0) {
        for (uint32_t bytes : {4096u, 2048u, 1024u})
            if (bytes < cfg.stack_dump) {
                g.cut_bytes = bytes;
                ladder_.push_back(g);
            }
        // The shortest cut, and the lower frequencies after it, cut every sample.
        if (g.cut_bytes) ladder_.back().cut_all = g.cut_all = true;
    }
    if (cfg.slow) {
        for (unsigned shift = 1; shift <= 3; ++shift) {
            g.rate_shift = shift;
            ladder_.push_back(g);
        }
    }
    // Spread between kFirstBelow and kLastBelow: each grade engages a little lower than the one before.
    thresholds_.assign(ladder_.size(), 0.0);
    const size_t n = ladder_.size() - 1;
    for (size_t k = 1; k <= n; ++k)
        thresholds_[k] = n == 1 ? kFirstBelow : kFirstBelow - double(k - 1) * (kFirstBelow - kLastBelow) / double(n - 1);
    engaged_.assign(ladder_.size(), 0);
    release_.assign(ladder_.size(), Clock::duration(kRelease));
    undone_at_.assign(ladder_.size(), Clock::time_point{});
}

bool PressureGrader::update(double headroom, Clock::time_point now) {
    bool changed = false;
    // Up to every grade whose level headroom is below, at once: one pass can take an eighth of
    // staging (a ring woken at its watermark holds 8 MiB), and one grade per pass reached the
    // shortest cut only once staging was gone (a disk throttled to 200 MB/s: 23 %, 11 %, 0 % free
    // at three passes in a row, and samples dropped). A lower frequency only once headroom has
    // stayed low for kSustained (a burst passes without changing what the samples mean), one step
    // at a time.
    auto engage = [&] {
        ++level_;
        ++engaged_[level_];
        // Back soon after it was undone: the output only keeps up at this grade; undo it later
        // next time. Back after a calm stretch: the usual wait.
        const bool flap = undone_at_[level_] != Clock::time_point{} && now - undone_at_[level_] < kFlapWindow;
        release_[level_] = flap ? std::min<Clock::duration>(2 * release_[level_], kMaxRelease) : Clock::duration(kRelease);
        worst_ = std::max(worst_, level_);
        changed = true;
        above_ = false;  // the room that undoes it is counted from now, not from before it came back
    };
    auto slower = [&] { return ladder_[level_ + 1].rate_shift > ladder_[level_].rate_shift; };
    while (level_ + 1 < ladder_.size() && headroom < thresholds_[level_ + 1] && !slower()) engage();
    if (level_ + 1 < ladder_.size() && headroom < thresholds_[level_ + 1]) {
        if (below_ && now - below_since_ >= kSustained) {
            engage();
            below_ = false;
        } else if (!below_) {
            below_ = true;
            below_since_ = now;
        }
    } else {
        below_ = false;
    }
    // Down one grade once headroom has stayed well above this one's level for its wait (release_).
    if (!changed && level_ > 0 && headroom > std::min(0.95, thresholds_[level_] + kMargin)) {
        if (!above_) {
            above_ = true;
            above_since_ = now;
        } else if (now - above_since_ >= release_[level_]) {
            undone_at_[level_] = now;
            --level_;
            changed = true;
            above_since_ = now;  // the next one waits as long again
        }
    } else if (!changed) {
        above_ = false;
    }
    // Dropping: at once when headroom is almost gone, and stopped as soon as there is room again
    // (not after kRelease: a second of dropping everything would be a hole in the profile). So it
    // leaves out about what the output cannot take, in bursts between the two levels.
    if (!dropping_ && headroom < kDropBelow) {
        dropping_ = true;
        ++drops_engaged_;
        changed = true;
    } else if (dropping_ && headroom > kDropUntil) {
        dropping_ = false;
        changed = true;
    }
    return changed;
}

std::string PressureGrader::describe(size_t level) const {
    const Grade& g = ladder_[level];
    const Grade& base = ladder_[0];
    std::string s;
    auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
    if (g.zstd_level != base.zstd_level) add("zstd " + std::to_string(g.zstd_level));
    if (g.cut_bytes) add("stacks cut to " + std::to_string(g.cut_bytes) + " bytes");
    if (g.rate_shift) add("frequency / " + std::to_string(1u << g.rate_shift));
    return s.empty() ? "normal" : s;
}

}  // namespace ringcap
