#include "ringcap/hotplug.hpp"

#include <algorithm>
#include <ostream>

namespace ringcap {

void HotplugWatch::check(RingSource& source, Collector& collector, FileOutput& output, std::ostream& log) {
    const std::vector<int> online = online_cpus();
    auto rings = source.rings();
    for (size_t i = 0; i < rings.size(); ++i) {
        CpuState& st = cpus_[i];
        const int cpu = rings[i].cpu;
        const bool now = std::find(online.begin(), online.end(), cpu) != online.end();
        if (now == st.online) continue;
        st.online = now;
        if (!now) {
            ++st.went_offline;
            log << "ringcap: cpu " << cpu << " went offline: nothing is recorded on it until it is back\n";
            continue;
        }
        collector.release_ring(i);
        try {
            if (!source.reopen(i)) {
                log << "ringcap: cpu " << cpu << " is back online, but per-task events cannot be opened again "
                        "(they would not follow the tasks' children): nothing more is recorded on it\n";
                continue;
            }
        } catch (const Error& e) {
            log << "ringcap: cpu " << cpu << " is back online, but its events could not be opened again: " << e.what()
                 << "\n";
            continue;
        }
        for (const auto& ev : rings[i].events) output.add_ids(ev.event_index, {ev.id});
        collector.adopt_ring(i);
        ++st.reopened;
        log << "ringcap: cpu " << cpu << " is back online: its events are open again\n";
    }
}

void HotplugWatch::annotate(CollectorSnapshot& c) const {
    for (size_t i = 0; i < c.rings.size() && i < cpus_.size(); ++i) {
        c.rings[i].went_offline = cpus_[i].went_offline;
        c.rings[i].reopened = cpus_[i].reopened;
        c.rings[i].offline = !cpus_[i].online;
    }
}

}  // namespace ringcap
