// CPU hotplug during a record. A CPU that goes offline takes its perf events with it: they never
// sample again, even once it is back, and enabling them again does nothing. So when it is back, its
// ring is drained and its events are opened anew, and the file learns their ids (perf record does
// not do this).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <vector>

#include "ringcap/collector.hpp"
#include "ringcap/file_output.hpp"
#include "ringcap/source.hpp"

namespace ringcap {

class HotplugWatch {
public:
    HotplugWatch() = default;
    explicit HotplugWatch(size_t rings) : cpus_(rings) {}

    // Compares the online CPUs (/sys/devices/system/cpu/online: 3 syscalls, so on the tick) with
    // the rings' and acts on changes, saying so in one line each. Not from inside a loop callback.
    void check(RingSource& source, Collector& collector, FileOutput& output, std::ostream& log);
    // The per-ring hotplug counts of a snapshot.
    void annotate(CollectorSnapshot& c) const;

private:
    struct CpuState {
        bool online = true;  // as last seen
        uint32_t went_offline = 0, reopened = 0;
    };
    std::vector<CpuState> cpus_;
};

}  // namespace ringcap
