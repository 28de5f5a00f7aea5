#include "ringcap/hotplug.hpp"

#include <algorithm>
#include <cerrno>
#include <linux/netlink.h>
#include <ostream>
#include <sys/socket.h>

namespace ringcap {

CpuUevents CpuUevents::open() {
    CpuUevents u;
    u.fd_.reset(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_KOBJECT_UEVENT));
    if (!u.fd_) return u;
    sockaddr_nl addr{};
    addr.nl_family = AF_NETLINK;
    addr.nl_groups = 1;  // the kernel's broadcast group (udev listens to the same)
    if (::bind(u.fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) u.fd_.reset();
    return u;
}

bool CpuUevents::about_cpu(std::string_view m) {
    m = m.substr(0, m.find('\0'));
    const size_t at = m.find('@');
    if (at == std::string_view::npos) return false;
    const std::string_view action = m.substr(0, at), path = m.substr(at + 1);
    constexpr std::string_view kCpu = "/devices/system/cpu/cpu";
    return (action == "online" || action == "offline" || action == "add" || action == "remove") &&
           path.substr(0, kCpu.size()) == kCpu && path.size() > kCpu.size() &&
           path.find_first_not_of("0123456789", kCpu.size()) == std::string_view::npos;
}

bool CpuUevents::take() {
    bool cpu = false;
    char buf[8192];
    for (;;) {
        const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
        if (n < 0) return cpu || errno == ENOBUFS;  // EAGAIN: all read; ENOBUFS: some were lost
        cpu |= about_cpu(std::string_view(buf, size_t(n)));
    }
}

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
