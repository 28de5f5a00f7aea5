// Which DSOs the BUILD_ID feature and the build-id cache cover: as perf, only those that samples
// hit (every file mapped executable with --buildid-all). The ring readers note each user-space
// sample's (pid, page) in a SampleHits table, a fixed open-addressing set (no allocation, no lock on
// the hot path); each collector hands its table and the mappings it saw to the DsoRegistry at its
// tick, where pages are resolved against every process's executable mappings. A page whose mapping
// another collector has not handed over yet waits a few hand-overs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace ringcap {

// What a MMAP/MMAP2 record says about one executable mapping.
struct MappedFile {
    uint32_t pid = 0;
    uint64_t start = 0, end = 0;
    uint32_t maj = 0, min = 0;
    uint64_t ino = 0;
    bool has_inode = false;  // MMAP2 with device and inode (not MMAP, not a build-id MMAP2)
    std::string path;        // as the kernel names it: "/usr/lib/...", "//anon", "[vdso]"
};

// A file of the registry: its name and identity, and one mapping of it (for /proc/PID/map_files).
struct DsoRef {
    std::string path;
    uint32_t maj = 0, min = 0;
    uint64_t ino = 0;
    bool has_inode = false;
    uint32_t pid = 0;
    uint64_t start = 0, end = 0;
};

// (pid, page) of user-space sample addresses. Fixed capacity; once three quarters full it stops
// taking new pages and says so (overflowed): the registry then counts every file as hit.
class SampleHits {
public:
    explicit SampleHits(unsigned capacity_log2 = 14);
    // Hot path: one sample. Pages are 4 KiB; pids fit 22 bits, user addresses 47.
    void add(uint32_t pid, uint64_t ip) {
        const uint64_t key = (uint64_t(pid) << 36 | ((ip >> 12) & kPageMask)) + 1;  // 0 marks a free slot
        if (key == last_) return;  // the common case: a hot loop's samples land on one page
        last_ = key;
        size_t i = size_t((key * 0x9e3779b97f4a7c15ull) >> shift_);
        for (;;) {
            if (slots_[i] == key) return;
            if (slots_[i] == 0) {
                if (used_ >= limit_) {
                    overflowed_ = true;
                    return;
                }
                slots_[i] = key;
                ++used_;
                return;
            }
            i = (i + 1) & mask_;
        }
    }
    size_t size() const { return used_; }
    bool overflowed() const { return overflowed_; }
    // Calls f(pid, page_address) for every entry, then empties the table.
    template <typename F>
    void take(F&& f) {
        for (auto& k : slots_)
            if (k != 0) {
                const uint64_t v = k - 1;
                f(uint32_t(v >> 36), (v & kPageMask) << 12);
                k = 0;
            }
        used_ = 0;
        last_ = 0;
        overflowed_ = false;
    }

private:
    static constexpr uint64_t kPageMask = (1ull << 36) - 1;
    std::vector<uint64_t> slots_;
    size_t mask_, limit_, used_ = 0;
    uint64_t last_ = 0;  // the key added last
    unsigned shift_;
    bool overflowed_ = false;
};

struct DsoRegistryStats {
    size_t files = 0;             // distinct files mapped executable
    size_t hit = 0;               // of which samples hit
    size_t unresolved_pages = 0;  // sample pages that fell in no known mapping (given up on)
    bool all_hit = false;         // a table overflowed, or too many mappings to keep: every file counts
};

// Shared by the collectors (their hand-overs) and the session (its start records and queries).
class DsoRegistry {
public:
    using Clock = std::chrono::steady_clock;
    // Mappings kept (of live processes, and of those that exited less than kExitGrace ago) before
    // the registry stops resolving pages and counts every file as hit.
    static constexpr size_t kMaxRanges = size_t(1) << 20;
    static constexpr auto kExitGrace = std::chrono::seconds(3);

    void add_mappings(std::span<const MappedFile> maps);
    // Processes that exited (PERF_RECORD_EXIT of their main thread): their mappings are dropped a
    // few seconds later (samples other collectors saw before the exit have been handed over by
    // then), so a host that starts processes all day does not grow the registry without bound.
    void add_exits(std::span<const uint32_t> pids, Clock::time_point now = Clock::now());
    // Resolves and empties `hits`. Pages not resolved yet are retried at the next hand-overs.
    void add_hits(SampleHits& hits, Clock::time_point now = Clock::now());
    // The files (a path, not the kernel's "//anon" or "[vdso]") for BUILD_ID, hit ones (all with
    // `all`), in path order.
    std::vector<DsoRef> dsos(bool all) const;
    DsoRegistryStats stats() const;

private:
    struct Range {
        uint64_t start, end;
        size_t dso;
        uint64_t seq;  // when it was added (add_mappings calls), to drop only what predates an exit
    };
    struct Exit {
        Clock::time_point when;
        uint64_t seq;
    };
    struct Dso {
        DsoRef ref;
        bool hit = false;
    };
    size_t dso_index(const MappedFile& m);
    bool resolve(uint32_t pid, uint64_t page);  // locked
    void retry_pending();                        // locked
    void drop_exited(Clock::time_point now);     // locked

    mutable std::mutex mu_;
    std::map<std::tuple<std::string, uint32_t, uint32_t, uint64_t>, size_t> index_;
    std::vector<Dso> dsos_;
    std::unordered_map<uint32_t, std::vector<Range>> ranges_;  // per pid
    size_t range_count_ = 0;
    uint64_t seq_ = 0;
    std::unordered_map<uint32_t, Exit> exited_;
    std::unordered_map<uint64_t, unsigned> pending_;  // (pid << 36 | page >> 12) -> hand-overs waited
    size_t unresolved_ = 0;
    bool all_hit_ = false;
};

}  // namespace ringcap
