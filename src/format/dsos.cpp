#include "ringcap/dsos.hpp"

#include <algorithm>

namespace ringcap {

namespace {
// Hand-overs a page waits for its mapping (another collector's tick, 1 s each) before it is given up.
constexpr unsigned kPendingRounds = 4;
// Pages waiting at once before every file counts as hit instead.
constexpr size_t kMaxPending = size_t(1) << 16;

// A file's path, not one of the kernel's names ("//anon", "//toolong", "[vdso]", "[heap]").
bool is_file_path(const std::string& p) { return p.size() > 1 && p[0] == '/' && p[1] != '/'; }
}  // namespace

SampleHits::SampleHits(unsigned capacity_log2)
    : slots_(size_t(1) << capacity_log2, 0),
      mask_(slots_.size() - 1),
      limit_(slots_.size() / 4 * 3),
      shift_(64 - capacity_log2) {}

size_t DsoRegistry::dso_index(const MappedFile& m) {
    auto key = std::make_tuple(m.path, m.has_inode ? m.maj : 0u, m.has_inode ? m.min : 0u, m.has_inode ? m.ino : 0);
    auto it = index_.find(key);
    if (it != index_.end()) {
        // The newest mapping of it: the likeliest to be alive at the end (/proc/PID/map_files).
        DsoRef& ref = dsos_[it->second].ref;
        ref.pid = m.pid;
        ref.start = m.start;
        ref.end = m.end;
        return it->second;
    }
    dsos_.push_back({DsoRef{m.path, m.maj, m.min, m.ino, m.has_inode, m.pid, m.start, m.end}, false});
    index_.emplace(std::move(key), dsos_.size() - 1);
    return dsos_.size() - 1;
}

void DsoRegistry::add_mappings(std::span<const MappedFile> maps) {
    if (maps.empty()) return;
    std::lock_guard lock(mu_);
    for (const auto& m : maps) {
        const size_t d = dso_index(m);
        if (all_hit_) continue;
        if (range_count_ >= kMaxRanges) {
            // Bounded memory on a host that starts processes all day: from here on every file counts.
            all_hit_ = true;
            ranges_.clear();
            pending_.clear();
            continue;
        }
        auto& ranges = ranges_[m.pid];
        // Each rotated file's start records name every live mapping again: kept once.
        if (std::any_of(ranges.begin(), ranges.end(),
                        [&](const Range& r) { return r.start == m.start && r.end == m.end && r.dso == d; }))
            continue;
        ranges.push_back({m.start, m.end, d, seq_});
        ++range_count_;
    }
    ++seq_;
    retry_pending();
}

void DsoRegistry::add_exits(std::span<const uint32_t> pids, Clock::time_point now) {
    if (pids.empty()) return;
    std::lock_guard lock(mu_);
    for (uint32_t pid : pids) exited_[pid] = {now, seq_};
}

void DsoRegistry::drop_exited(Clock::time_point now) {
    for (auto it = exited_.begin(); it != exited_.end();) {
        if (now - it->second.when < kExitGrace) {
            ++it;
            continue;
        }
        // What the process mapped before its exit was handed over; a new process with the pid keeps
        // what it mapped since.
        if (auto r = ranges_.find(it->first); r != ranges_.end()) {
            auto& v = r->second;
            const uint64_t seq = it->second.seq;
            const size_t before = v.size();
            v.erase(std::remove_if(v.begin(), v.end(), [seq](const Range& x) { return x.seq < seq; }), v.end());
            range_count_ -= before - v.size();
            if (v.empty()) ranges_.erase(r);
        }
        it = exited_.erase(it);
    }
}

bool DsoRegistry::resolve(uint32_t pid, uint64_t page) {
    const auto it = ranges_.find(pid);
    if (it == ranges_.end()) return false;
    bool found = false;
    // Every mapping that ever covered the page (an address reused after munmap marks both files:
    // at worst one build-id too many).
    for (const Range& r : it->second)
        if (page + 4096 > r.start && page < r.end) {
            dsos_[r.dso].hit = true;
            found = true;
        }
    return found;
}

void DsoRegistry::retry_pending() {
    for (auto it = pending_.begin(); it != pending_.end();) {
        const uint64_t k = it->first;
        if (resolve(uint32_t(k >> 36), (k & ((1ull << 36) - 1)) << 12)) {
            it = pending_.erase(it);
        } else {
            ++it;
        }
    }
}

void DsoRegistry::add_hits(SampleHits& hits, Clock::time_point now) {
    std::lock_guard lock(mu_);
    if (hits.overflowed()) all_hit_ = true;
    if (all_hit_) {
        hits.take([](uint32_t, uint64_t) {});
        return;
    }
    drop_exited(now);
    // Pages that waited long enough are given up on: anonymous code (a JIT) that no file maps, or a
    // process whose mappings never reached the rings.
    for (auto it = pending_.begin(); it != pending_.end();) {
        if (++it->second > kPendingRounds) {
            ++unresolved_;
            it = pending_.erase(it);
        } else {
            ++it;
        }
    }
    hits.take([&](uint32_t pid, uint64_t page) {
        if (resolve(pid, page) || all_hit_) return;
        if (pending_.size() >= kMaxPending) {
            all_hit_ = true;
            return;
        }
        pending_.emplace(uint64_t(pid) << 36 | page >> 12, 0u);
    });
}

std::vector<DsoRef> DsoRegistry::dsos(bool all) const {
    // (Pending pages were retried when the last mappings came: every hand-over brings its mappings first.)
    std::lock_guard lock(mu_);
    std::vector<DsoRef> out;
    for (const auto& d : dsos_)
        if (is_file_path(d.ref.path) && (all || all_hit_ || d.hit)) out.push_back(d.ref);
    std::sort(out.begin(), out.end(), [](const DsoRef& a, const DsoRef& b) { return a.path < b.path; });
    return out;
}

DsoRegistryStats DsoRegistry::stats() const {
    std::lock_guard lock(mu_);
    DsoRegistryStats s;
    for (const auto& d : dsos_) {
        if (!is_file_path(d.ref.path)) continue;
        ++s.files;
        s.hit += d.hit;
    }
    s.unresolved_pages = unresolved_ + pending_.size();
    s.all_hit = all_hit_;
    return s;
}

}  // namespace ringcap
