#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <dirent.h>
#include <linux/capability.h>
#include <cstring>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ringcap/events.hpp"

namespace ringcap {

namespace {

int perf_event_open(perf_event_attr* attr, pid_t pid, int cpu, int group_fd, unsigned long flags) {
    return static_cast<int>(::syscall(SYS_perf_event_open, attr, pid, cpu, group_fd, flags));
}

std::string open_failure(const EventSpec& spec, int cpu, int tid, int err, const perf_event_attr& attr) {
    std::string where = "perf_event_open(" + spec.name + ", cpu " + std::to_string(cpu) +
                        (tid >= 0 ? ", task " + std::to_string(tid) : std::string()) + "): " + errno_text(err);
    auto paranoid = read_sysctl("kernel/perf_event_paranoid");
    switch (err) {
        case EACCES:
        case EPERM:
            return where + "; not allowed with kernel.perf_event_paranoid=" +
                   (paranoid ? std::to_string(*paranoid) : std::string("?")) +
                   ": run as root (or with CAP_PERFMON), or set it to -1 for system-wide capture "
                   "(sysctl -w kernel.perf_event_paranoid=-1)";
        case ENOENT:
        case EOPNOTSUPP:
            if (spec.type == PERF_TYPE_HARDWARE)
                return "event '" + spec.name + "' is not supported on this machine (no hardware PMU, " +
                       errno_text(err) + "): use a software event such as cpu-clock";
            return "event '" + spec.name + "' is not supported by this kernel: " + errno_text(err);
        case ESRCH:
            return "task " + std::to_string(tid) + " does not exist (it exited during setup?): " + errno_text(err);
        case ENODEV:
            return where + "; CPU " + std::to_string(cpu) + " does not exist or is offline (see -C)";
        case EMFILE:
        case ENFILE:
            return where + "; too many open files: raise the limit (ulimit -n) or record fewer CPUs/events";
        case EINVAL:
            if (attr.freq) {
                auto maxrate = read_sysctl("kernel/perf_event_max_sample_rate");
                if (maxrate && attr.sample_freq > uint64_t(*maxrate))
                    return where + "; -F " + std::to_string(attr.sample_freq) +
                           " is above kernel.perf_event_max_sample_rate=" + std::to_string(*maxrate);
            }
            return where + "; the kernel rejected the event attributes";
        default:
            return where;
    }
}

}  // namespace

std::vector<CpuEvents> open_cpu_events(const std::vector<EventSpec>& specs, const std::vector<perf_event_attr>& attrs,
                                       const std::vector<int>& cpus, const std::vector<int>& tids,
                                       size_t ring_data_pages) {
    const std::vector<int> system_wide{-1};
    const std::vector<int>& targets = tids.empty() ? system_wide : tids;
    std::vector<CpuEvents> out;
    out.reserve(cpus.size());
    for (int cpu : cpus) {
        CpuEvents ce;
        ce.cpu = cpu;
        for (int tid : targets) {
            for (size_t e = 0; e < specs.size(); ++e) {
                perf_event_attr attr = attrs[e];
                int fd = perf_event_open(&attr, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
                if (fd < 0) throw Error(open_failure(specs[e], cpu, tid, errno, attr));
                OpenEvent ev;
                ev.fd.reset(fd);
                ev.cpu = cpu;
                ev.tid = tid;
                ev.event_index = e;
                if (::ioctl(fd, PERF_EVENT_IOC_ID, &ev.id) != 0)
                    throw Error("PERF_EVENT_IOC_ID failed for " + specs[e].name + ": " + errno_text(errno));
                if (ce.events.empty()) {
                    // Map the owner's ring before anything can poll it (seed 000).
                    auto ring = RingBuffer::map(fd, ring_data_pages);
                    if (!ring) {
                        int err = errno;
                        std::string msg = "mmap of a " + std::to_string(ring_data_pages) + "-page ring on cpu " +
                                          std::to_string(cpu) + " failed: " + errno_text(err);
                        if (err == EPERM || err == ENOMEM)
                            throw RingMemoryError(
                                msg + "; ring memory exceeds kernel.perf_event_mlock_kb (" +
                                std::to_string(read_sysctl("kernel/perf_event_mlock_kb").value_or(-1)) +
                                " KiB per user and CPU) plus RLIMIT_MEMLOCK: use a smaller -m, raise the sysctl or "
                                "ulimit -l, or run with CAP_IPC_LOCK");
                        throw Error(msg);
                    }
                    ce.ring = std::move(*ring);
                } else if (::ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ce.events.front().fd.get()) != 0) {
                    throw Error("PERF_EVENT_IOC_SET_OUTPUT of " + specs[e].name + " into the cpu " +
                                std::to_string(cpu) + " ring failed: " + errno_text(errno));
                }
                ce.events.push_back(std::move(ev));
            }
        }
        out.push_back(std::move(ce));
    }
    return out;
}

std::optional<std::vector<int>> threads_of(int pid) {
    std::string dir = "/proc/" + std::to_string(pid) + "/task";
    DIR* d = opendir(dir.c_str());
    if (!d) return std::nullopt;
    std::vector<int> tids;
    while (dirent* ent = readdir(d)) {
        char* end = nullptr;
        long t = std::strtol(ent->d_name, &end, 10);
        if (end && *end == 0 && t > 0) tids.push_back(int(t));
    }
    closedir(d);
    std::sort(tids.begin(), tids.end());
    return tids;
}

size_t default_ring_pages(size_t rings, bool can_lock_memory) {
    constexpr size_t kPerfDefault = 128;
    if (!can_lock_memory) return kPerfDefault;
    const size_t per_ring = (size_t(256) << 20) / std::max<size_t>(rings, 1) / page_size();
    size_t pages = kPerfDefault;
    while (pages * 2 <= std::min<size_t>(per_ring, 2048)) pages *= 2;
    return pages;
}

bool has_cap_ipc_lock() {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (syscall(SYS_capget, &hdr, data) != 0) return false;
    return data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32));
}

void enable_all(std::vector<CpuEvents>& cpus) {
    for (auto& c : cpus)
        for (auto& e : c.events)
            if (::ioctl(e.fd.get(), PERF_EVENT_IOC_ENABLE, 0) != 0)
                throw Error("PERF_EVENT_IOC_ENABLE failed: " + errno_text(errno));
}

void disable_all(std::vector<CpuEvents>& cpus) {
    for (auto& c : cpus)
        for (auto& e : c.events) ::ioctl(e.fd.get(), PERF_EVENT_IOC_DISABLE, 0);
}

std::vector<LostReading> read_lost_counts(const std::vector<CpuEvents>& cpus) {
    std::vector<LostReading> out;
    for (const auto& c : cpus)
        for (const auto& e : c.events) {
            // read_format = ID | LOST: { u64 value; u64 id; u64 lost; }
            uint64_t v[3] = {0, 0, 0};
            if (::read(e.fd.get(), v, sizeof v) == ssize_t(sizeof v) && v[2] != 0)
                out.push_back({e.id, c.cpu, e.event_index, v[2]});
        }
    return out;
}

}  // namespace ringcap
