// The ring-source seam: what a record drains. perf events (PerfSource, perf_source.hpp) and the
// bench's synthetic rings (testkit/) both hand the collectors mapped rings and the fds to poll, behind
// one interface; nothing downstream knows which one it has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <linux/perf_event.h>
#include <span>
#include <string>
#include <vector>

#include "ringcap/events.hpp"
#include "ringcap/ring.hpp"
#include "ringcap/synthesize.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

// One event writing into a ring, on one CPU (for one task, or for the whole CPU when tid is -1).
struct OpenEvent {
    UniqueFd fd;
    uint64_t id = 0;  // PERF_EVENT_IOC_ID; samples carry it (PERF_SAMPLE_IDENTIFIER)
    size_t event_index = 0;
    int cpu = -1;
    int tid = -1;
};

// A ring and the events that write into it. events[0] owns the mapping; the others are redirected
// into it (PERF_EVENT_IOC_SET_OUTPUT), so their wake-ups arrive on events[0]'s fd (seed 001).
struct SourceRing {
    int cpu = -1;
    std::vector<OpenEvent> events;
    RingBuffer ring;

    int owner_fd() const { return events.front().fd.get(); }
};

// Samples the source dropped for one event (the kernel's PERF_FORMAT_LOST count), read at the end.
struct LostReading {
    uint64_t id;
    int cpu;
    size_t event_index;
    uint64_t lost;
};

class RingSource {
public:
    virtual ~RingSource() = default;

    // The events, in the order of the file's attrs.
    virtual const std::vector<EventSpec>& specs() const = 0;
    // What it records, for -v: "system-wide", "3 task(s)".
    virtual std::string describe() const = 0;
    // One event's attr for these sampling settings (the plan decides the wake-up policy and applies
    // the target's inherit/enable_on_exec on top).
    virtual perf_event_attr attr(const EventSpec& spec, const SamplingConfig& sampling) const {
        return make_attr(spec, sampling);
    }
    // How many rings open() maps, and how many file descriptors it needs.
    virtual size_t ring_count() const = 0;
    virtual size_t fd_count() const = 0;
    // Whether its ring fds may be watched level-triggered (epoll). perf fds consume their readiness
    // when polled; an eventfd stays readable and would make epoll spin.
    virtual bool level_triggered_ok() const { return true; }
    // Whether its rings belong to CPUs that can go offline and come back (perf events do: the
    // session follows CPU hotplug for them; synthetic rings in memory do not).
    virtual bool follows_cpus() const { return false; }

    // Opens every event, disabled, and maps one ring of `data_pages` pages per ring owner. It may
    // adjust `attrs` (and specs()) to what the kernel allows, and says so in notes(). Throws
    // RingMemoryError when the kernel refuses the ring memory (the caller may retry with smaller
    // rings: a failed open leaves nothing open), Error for anything else.
    virtual void open(std::vector<perf_event_attr>& attrs, size_t data_pages) = 0;
    // What open() changed, one line each, to be printed.
    virtual std::vector<std::string> notes() const { return {}; }
    // After open(): the rings. The source keeps owning them (and their fds); collectors read them.
    virtual std::span<SourceRing> rings() = 0;

    // Ring `ring`'s events died with their CPU (it went offline and came back): opens them again,
    // enabled, with a new ring in the same place (the old one is unmapped: drain it first). The new
    // events have new ids. Returns false if this source cannot (per-task events would no longer
    // follow the tasks' children). Throws Error if the kernel refuses.
    virtual bool reopen(size_t /*ring*/) { return false; }

    // Starts the events that follow processes and mappings (perf's tracking event), before
    // synthesize() scans what exists, so that nothing started in between is missed.
    virtual void start_tracking() {}
    // Records describing what already runs (COMM, MMAP2, kernel maps), for the start of the file.
    virtual void synthesize(const RecordSink& /*sink*/, SynthesisStats& /*stats*/) {}
    // Starts sampling.
    virtual void enable() = 0;
    // Stops sampling; afterwards every record the source wrote is visible in its ring.
    virtual void disable() = 0;
    // After disable(): samples dropped at full rings, per event and ring; those of events reopen()
    // replaced included.
    virtual std::vector<LostReading> lost_counts() const = 0;
};

}  // namespace ringcap
