// The tasks and mappings as of a moment, for the flight recorder (window_output.hpp): a dump holds
// only the window's newest seconds, so the COMM/FORK/EXIT/MMAP2 records that named its tasks and
// mappings may lie before it. The records that describe tasks and mappings are kept, in time order,
// until the window's start passes them; then they are folded into a table (a thread's name, a
// process's mappings), which a dump writes first: every task and mapping as of the window's start,
// those that exit or are unmapped during the window included. Rotation (--switch-output) takes from
// it the tasks of a switch that exited before the next file's /proc scan (emit_gone). Pure logic
// over records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace ringcap {

// Where collectors hand over the records of tasks and mappings they copied (from their threads), for
// the session to take into its SidebandState.
struct SidebandInbox {
    std::mutex mu;
    std::vector<std::byte> records;  // whole records; each collector's in the order it copied them
};

// Threads by {pid, tid}.
using TaskSet = std::set<std::pair<uint32_t, uint32_t>>;

class SidebandState {
public:
    // An EXIT is folded only once it is this much older than the window's start: samples of a task
    // just before its exit may be committed a little after the exit record (another CPU's ring).
    static constexpr uint64_t kExitLagNs = 1'000'000'000;

    // Whether a record of this type describes tasks or mappings (COMM, FORK, EXIT, MMAP, MMAP2).
    static bool wanted(uint32_t type);
    // A record (whole, with kDefaultSampleType's sample_id, whose time it is kept by); others are
    // ignored. Start records (time 0) come first.
    void add(const std::byte* rec, size_t len);
    // Applies every kept record up to perf time `t` (EXITs up to t - kExitLagNs), oldest first.
    void fold(uint64_t t);
    // The same with the EXITs up to `exits` (a bound known to be safe, not a lag).
    void fold(uint64_t t, uint64_t exits);
    // The table as records: per process a COMM for each of its threads, then its mappings oldest
    // first (the kernel's own first). Times and ids zero (perf's synthesized records).
    void emit(std::vector<std::byte>& out) const;
    // The table's tasks that are not in `present` (the threads a /proc scan found), as emit() writes
    // them: a COMM for each such thread, and the mappings of each process none of whose threads is
    // there. Not the kernel's maps (the scan has them).
    void emit_gone(std::vector<std::byte>& out, const TaskSet& present) const;
    // The time of the newest record kept, not yet folded (0: none).
    uint64_t newest() const { return pending_.empty() ? 0 : pending_.rbegin()->first; }

    size_t processes() const { return procs_.size(); }
    size_t mappings() const;
    size_t pending() const { return pending_.size(); }
    uint64_t bytes() const { return bytes_; }  // kept records and the table, roughly

private:
    struct Process {
        std::map<uint32_t, std::string> threads;         // tid -> name
        std::vector<std::vector<std::byte>> maps;        // MMAP/MMAP2 records, oldest first
    };
    void apply(const std::vector<std::byte>& rec);
    void add_map(Process& p, const std::vector<std::byte>& rec);

    std::multimap<uint64_t, std::vector<std::byte>> pending_;  // by time
    std::map<uint32_t, Process> procs_;
    std::vector<std::vector<std::byte>> kernel_maps_;  // pid -1: the kernel and its modules
    uint64_t bytes_ = 0;
};

}  // namespace ringcap
