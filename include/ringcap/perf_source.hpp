// The perf ring source: perf events opened per CPU (system-wide or for tasks), one mmap'ed ring per
// CPU, the CPU's other events redirected into it, and perf's tracking event for processes and maps.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "ringcap/cgroup.hpp"
#include "ringcap/options.hpp"
#include "ringcap/source.hpp"

namespace ringcap {

// Where the events are opened.
struct PerfTarget {
    std::vector<int> cpus;  // one ring per CPU
    std::vector<int> tids;  // these tasks on every CPU; empty = every task (system-wide)
    bool per_task = false;  // inherit to the tasks' children (-p, -t, or a command without -a/-C)
    // The events start at the recorded command's exec (enable_on_exec): enable() and start_tracking()
    // leave them to the kernel, and the command's own records replace the /proc synthesis of tasks.
    bool at_exec = false;
    std::vector<int> synth_pids;  // per task: the processes whose COMM/MMAP2 are synthesized
    bool data_maps = false;       // dwarf call graphs: also synthesize readable file mappings
    // -G: per user event, in order, the cgroup whose tasks it follows on every CPU; null (or past the
    // end) = every task. The tracking event stays system-wide, as perf's: COMM/MMAP of every task.
    std::vector<std::shared_ptr<const Cgroup>> cgroups;

    // -a/-C (checked against the online CPUs) and -p/-t (checked to exist). A command recorded per
    // task has no tid yet: the caller adds its pid once it is forked. -G groups are opened here.
    static PerfTarget from_options(const RecordOptions& o);
};

class PerfSource final : public RingSource {
public:
    // The user's events, then perf's tracking event (dummy:u: mmap, mmap2, comm, comm_exec, task).
    PerfSource(const std::vector<EventSpec>& events, PerfTarget target);

    const std::vector<EventSpec>& specs() const override { return specs_; }
    std::string describe() const override;
    perf_event_attr attr(const EventSpec& spec, const SamplingConfig& sampling) const override;
    size_t ring_count() const override { return target_.cpus.size(); }
    size_t fd_count() const override;
    void open(std::vector<perf_event_attr>& attrs, size_t data_pages) override;
    std::vector<std::string> notes() const override { return notes_; }
    bool reopen(size_t ring) override;
    bool follows_cpus() const override { return true; }
    std::span<SourceRing> rings() override { return rings_; }
    void start_tracking() override;
    void synthesize(const RecordSink& sink, SynthesisStats& stats) override;
    void enable() override;
    void disable() override;
    std::vector<LostReading> lost_counts() const override;

private:
    bool exclude_kernel(std::vector<perf_event_attr>& attrs) const;

    std::vector<EventSpec> specs_;
    PerfTarget target_;
    std::vector<SourceRing> rings_;
    uint64_t sample_type_ = 0;
    std::vector<perf_event_attr> attrs_;  // as opened, for reopen()
    size_t data_pages_ = 0;
    bool user_only_ = false;  // the kernel refused kernel samples: every event is :u
    std::vector<LostReading> retired_lost_;  // of the events reopen() closed, read before they closed
    std::vector<std::string> notes_;
};

// The threads of a process (/proc/PID/task), or nullopt if it does not exist.
std::optional<std::vector<int>> threads_of(int pid);

}  // namespace ringcap
