// CPU hotplug during a record. A CPU that goes offline takes its perf events with it: they never
// sample again, even once it is back, and enabling them again does nothing. So when it is back, its
// ring is drained and its events are opened anew, and the file learns their ids (perf record does
// not do this).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string_view>
#include <vector>

#include "ringcap/collector.hpp"
#include "ringcap/sys.hpp"
#include "ringcap/record_output.hpp"
#include "ringcap/source.hpp"

namespace ringcap {

// The kernel's uevents (NETLINK_KOBJECT_UEVENT), for "online@/devices/system/cpu/cpuN" and
// "offline@...": the record follows hotplug as it happens instead of reading the online CPUs every
// second. Not available everywhere (a network namespace of a container gets none of the host's):
// the session then checks every second, and with it, every few seconds in case none arrive.
class CpuUevents {
public:
    // The socket, or none (then fd() is -1) if the kernel refuses it.
    static CpuUevents open();
    int fd() const { return fd_.get(); }
    // Reads every uevent waiting; true if one was about a CPU, or some were lost (the socket's
    // buffer overflowed: look anyway).
    bool take();
    // The test of one uevent's text ("ACTION@DEVPATH\0KEY=VALUE\0...").
    static bool about_cpu(std::string_view message);

private:
    UniqueFd fd_;
};

class HotplugWatch {
public:
    HotplugWatch() = default;
    explicit HotplugWatch(size_t rings) : cpus_(rings) {}

    // Compares the online CPUs (/sys/devices/system/cpu/online: 3 syscalls, so on a tick) with the
    // rings' and acts on changes, saying so in one line each. `replace(i)` drains ring i, has the
    // source reopen it and the collector adopt the new one (on the collector's thread); it returns
    // false if the source cannot, and throws Error if the kernel refuses.
    void check(RingSource& source, RecordOutput& output, std::ostream& log, const std::function<bool(size_t)>& replace);
    // The per-ring hotplug counts of a collector's snapshot; its rings start at `first_ring`.
    void annotate(CollectorSnapshot& c, size_t first_ring) const;

private:
    struct CpuState {
        bool online = true;  // as last seen
        uint32_t went_offline = 0, reopened = 0;
    };
    std::vector<CpuState> cpus_;
};

}  // namespace ringcap
