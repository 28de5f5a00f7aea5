#include "ringcap/hotplug.hpp"

#include <algorithm>
#include <ostream>

namespace ringcap {

void HotplugWatch::check(RingSource& source, RecordOutput& output, std::ostream& log,
                         const std::function<bool(size_t)>& replace) {
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
        try {
            if (!replace(i)) {
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
        ++st.reopened;
        log << "ringcap: cpu " << cpu << " is back online: its events are open again\n";
    }
}

void HotplugWatch::annotate(CollectorSnapshot& c, size_t first_ring) const {
    for (size_t i = 0; i < c.rings.size() && first_ring + i < cpus_.size(); ++i) {
        const CpuState& st = cpus_[first_ring + i];
        c.rings[i].went_offline = st.went_offline;
        c.rings[i].reopened = st.reopened;
        c.rings[i].offline = !st.online;
    }
}

}  // namespace ringcap
