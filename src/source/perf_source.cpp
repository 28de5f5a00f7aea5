#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <dirent.h>
#include <cstring>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ringcap/perf_source.hpp"
#include "ringcap/records.hpp"

namespace ringcap {

namespace {

// perf_event_open refused for lack of privilege (kernel.perf_event_paranoid, CAP_PERFMON).
class PermissionError : public Error {
public:
    using Error::Error;
};

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
            // Above 2 (Debian's kernel: 3, its default) only CAP_SYS_ADMIN passes; CAP_PERFMON does
            // not (a systemd unit whose bounding set has CAP_PERFMON alone is refused there).
            return where + "; not allowed with kernel.perf_event_paranoid=" +
                   (paranoid ? std::to_string(*paranoid) : std::string("?")) +
                   (paranoid && *paranoid > 2
                        ? ": run as root with CAP_SYS_ADMIN (at this level CAP_PERFMON is not enough)"
                        : ": run as root (or with CAP_PERFMON)") +
                   ", or set it to -1 for system-wide capture (sysctl -w kernel.perf_event_paranoid=-1)";
        case ENOENT:
        case EOPNOTSUPP:
            if (attr.precise_ip)
                return "event '" + spec.name + "': this machine cannot sample it precisely (" + errno_text(err) +
                       "): drop the p/P modifiers";
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
            if (attr.precise_ip)
                return where + "; the kernel rejected the event attributes: drop the p/P modifiers "
                               "(precise_ip " + std::to_string(attr.precise_ip) + ")";
            return where + "; the kernel rejected the event attributes";
        default:
            return where;
    }
}

// A cgroup event refused for other reasons than privilege: if the same event opens without the
// cgroup, the cgroup is the reason and this throws saying so; else the caller reports the event.
void throw_if_cgroup_refused(const EventSpec& spec, int cpu, const Cgroup& cg, int err, const perf_event_attr& attr) {
    perf_event_attr probe = attr;
    const int fd = perf_event_open(&probe, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) return;
    UniqueFd owned(fd);
    const std::string where = "perf_event_open(" + spec.name + ", cpu " + std::to_string(cpu) + ", cgroup " +
                              cg.path + "): " + errno_text(err);
    switch (err) {
        case EINVAL:
        case EOPNOTSUPP:
            throw Error(where + "; this kernel cannot follow a cgroup's tasks with perf events (it needs "
                                "CONFIG_CGROUP_PERF=y): record without -G, or use a kernel built with it");
        case ENOENT:
        case EBADF:
            throw Error(where + "; " + cg.path + " is not a group of a hierarchy with the perf_event controller "
                                "(is perf_event bound to a cgroup v1 hierarchy? then give the group there)");
        case EMFILE:
        case ENFILE:
            return;  // the generic message says what to raise
        default:
            throw Error(where + "; the event opens without -G: the kernel refused the cgroup");
    }
}

// Opens every event on every CPU (disabled), for each task in `tids` or system-wide if `tids` is
// empty (an event with a cgroup in `cgroups`: that cgroup's tasks), maps one ring per CPU on its
// first event and redirects the others into it.
std::vector<SourceRing> open_rings(const std::vector<EventSpec>& specs, const std::vector<perf_event_attr>& attrs,
                                   const std::vector<int>& cpus, const std::vector<int>& tids,
                                   const std::vector<std::shared_ptr<const Cgroup>>& cgroups, size_t data_pages) {
    const std::vector<int> system_wide{-1};
    const std::vector<int>& targets = tids.empty() ? system_wide : tids;
    std::vector<SourceRing> out;
    out.reserve(cpus.size());
    for (int cpu : cpus) {
        SourceRing ring;
        ring.cpu = cpu;
        for (int tid : targets) {
            for (size_t e = 0; e < specs.size(); ++e) {
                perf_event_attr attr = attrs[e];
                // -G: the cgroup's directory fd in place of a pid (system-wide targets only).
                const Cgroup* cg = tid < 0 && e < cgroups.size() ? cgroups[e].get() : nullptr;
                int fd = cg ? perf_event_open(&attr, cg->fd.get(), cpu, -1, PERF_FLAG_FD_CLOEXEC | PERF_FLAG_PID_CGROUP)
                            : perf_event_open(&attr, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
                if (fd < 0) {
                    const int err = errno;
                    if (err == EACCES || err == EPERM) throw PermissionError(open_failure(specs[e], cpu, tid, err, attr));
                    if (cg) throw_if_cgroup_refused(specs[e], cpu, *cg, err, attr);
                    throw Error(open_failure(specs[e], cpu, tid, err, attr));
                }
                OpenEvent ev;
                ev.fd.reset(fd);
                ev.cpu = cpu;
                ev.tid = tid;
                ev.event_index = e;
                if (::ioctl(fd, PERF_EVENT_IOC_ID, &ev.id) != 0)
                    throw Error("PERF_EVENT_IOC_ID failed for " + specs[e].name + ": " + errno_text(errno));
                if (ring.events.empty()) {
                    // Map the owner's ring before anything can poll it (seed 000).
                    auto mapped = RingBuffer::map(fd, data_pages);
                    if (!mapped) {
                        int err = errno;
                        std::string msg = "mmap of a " + std::to_string(data_pages) + "-page ring on cpu " +
                                          std::to_string(cpu) + " failed: " + errno_text(err);
                        if (err == EPERM || err == ENOMEM)
                            throw RingMemoryError(
                                msg + "; ring memory exceeds kernel.perf_event_mlock_kb (" +
                                std::to_string(read_sysctl("kernel/perf_event_mlock_kb").value_or(-1)) +
                                " KiB per user and CPU) plus RLIMIT_MEMLOCK: use a smaller -m, raise the sysctl or "
                                "ulimit -l, or run with CAP_IPC_LOCK");
                        throw Error(msg);
                    }
                    ring.ring = std::move(*mapped);
                } else if (::ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ring.owner_fd()) != 0) {
                    throw Error("PERF_EVENT_IOC_SET_OUTPUT of " + specs[e].name + " into the cpu " +
                                std::to_string(cpu) + " ring failed: " + errno_text(errno));
                }
                ring.events.push_back(std::move(ev));
            }
        }
        out.push_back(std::move(ring));
    }
    return out;
}

// Appends the kernel's PERF_FORMAT_LOST count of each event of `r` that lost samples.
void read_lost(const SourceRing& r, std::vector<LostReading>& out) {
    for (const auto& e : r.events) {
        // read_format = ID | LOST: { u64 value; u64 id; u64 lost; }
        uint64_t v[3] = {0, 0, 0};
        if (::read(e.fd.get(), v, sizeof v) == ssize_t(sizeof v) && v[2] != 0)
            out.push_back({e.id, r.cpu, e.event_index, v[2]});
    }
}

std::string cpu_list_text(const std::vector<int>& cpus) {
    std::string list;
    for (int c : cpus) {
        if (!list.empty()) list += ',';
        list += std::to_string(c);
    }
    return list;
}

}  // namespace

PerfTarget PerfTarget::from_options(const RecordOptions& o) {
    PerfTarget t;
    const std::vector<int> online = online_cpus();
    t.cpus = o.cpus ? *o.cpus : online;
    for (int c : t.cpus)
        if (std::find(online.begin(), online.end(), c) == online.end())
            throw Error("-C: CPU " + std::to_string(c) + " does not exist or is offline (online: " +
                        cpu_list_text(online) + ")");
    for (int pid : o.pids) {
        auto threads = threads_of(pid);
        if (!threads || threads->empty()) throw Error("-p " + std::to_string(pid) + ": no such process");
        t.tids.insert(t.tids.end(), threads->begin(), threads->end());
    }
    for (int tid : o.tids) {
        struct stat st{};
        if (stat(("/proc/" + std::to_string(tid)).c_str(), &st) != 0)
            throw Error("-t " + std::to_string(tid) + ": no such thread");
        t.tids.push_back(tid);
    }
    std::sort(t.tids.begin(), t.tids.end());
    t.tids.erase(std::unique(t.tids.begin(), t.tids.end()), t.tids.end());
    t.per_task = ringcap::per_task(o);
    t.at_exec = t.per_task && !o.command.empty();
    t.synth_pids = o.pids;
    t.synth_pids.insert(t.synth_pids.end(), o.tids.begin(), o.tids.end());  // a thread's process is found via /proc/TID
    t.data_maps = o.sampling.call_graph == CallGraph::Dwarf;
    for (const std::string& name : o.cgroups) {
        std::shared_ptr<const Cgroup> cg;
        for (const auto& seen : t.cgroups)
            if (seen && seen->name == name) cg = seen;  // one fd per group, as perf
        if (!cg && !name.empty()) cg = std::make_shared<const Cgroup>(open_cgroup(name));
        t.cgroups.push_back(std::move(cg));
    }
    return t;
}

PerfSource::PerfSource(const std::vector<EventSpec>& events, PerfTarget target)
    : specs_(events), target_(std::move(target)) {
    // The tracking event carries COMM/MMAP/FORK/EXIT records, so perf report can name processes and
    // resolve symbols of what starts during the record.
    specs_.push_back(tracking_event());
}

std::string PerfSource::describe() const {
    if (!target_.tids.empty()) return std::to_string(target_.tids.size()) + " task(s)";
    // -G: "system-wide, cgroup X", or per event when they differ.
    std::string text = "system-wide";
    const auto& cgs = target_.cgroups;
    const bool one = !cgs.empty() && cgs.size() + 1 == specs_.size() &&
                     std::all_of(cgs.begin(), cgs.end(), [&](const auto& c) { return c == cgs.front(); });
    if (one && cgs.front()) return text + ", cgroup " + cgs.front()->name;
    for (size_t e = 0; e < cgs.size() && e < specs_.size(); ++e)
        text += ", " + specs_[e].name + (cgs[e] ? " in cgroup " + cgs[e]->name : std::string(" of every task"));
    return text;
}

namespace {
// Kernels before 5.1 refuse attr.ksymbol/bpf_event with EINVAL: then the tracking event goes without.
bool kernel_has_ksymbol() {
    static const bool has = [] {
        perf_event_attr a{};
        a.size = sizeof a;
        a.type = PERF_TYPE_SOFTWARE;
        a.config = PERF_COUNT_SW_DUMMY;
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        a.disabled = 1;
        a.ksymbol = 1;
        a.bpf_event = 1;
        const int fd = perf_event_open(&a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0) return errno != EINVAL && errno != E2BIG;
        UniqueFd owned(fd);
        return true;
    }();
    return has;
}
}  // namespace

perf_event_attr PerfSource::attr(const EventSpec& spec, const SamplingConfig& sampling) const {
    perf_event_attr a = make_attr(spec, sampling);
    if (spec.tracking && !kernel_has_ksymbol()) a.ksymbol = a.bpf_event = 0;
    if (target_.per_task) a.inherit = 1;  // follow the tasks' children, as perf does
    // A command's events switch on at its exec, so its start is not missed and ringcap's own
    // fork/exec work is not recorded.
    if (target_.at_exec) a.enable_on_exec = 1;
    return a;
}

size_t PerfSource::fd_count() const {
    return target_.cpus.size() * std::max<size_t>(1, target_.tids.size()) * specs_.size();
}

bool PerfSource::exclude_kernel(std::vector<perf_event_attr>& attrs) const {
    bool changed = false;
    for (auto& a : attrs)
        if (!a.exclude_kernel && !a.exclude_user) {
            a.exclude_kernel = 1;
            a.exclude_hv = 1;
            changed = true;
        }
    return changed;
}

void PerfSource::open(std::vector<perf_event_attr>& attrs, size_t data_pages) {
    if (user_only_) exclude_kernel(attrs);
    try {
        rings_ = open_rings(specs_, attrs, target_.cpus, target_.tids, target_.cgroups, data_pages);
    } catch (const PermissionError&) {
        // As perf record: when kernel.perf_event_paranoid (2, Debian's default) lets this user
        // sample its own tasks in user space only, record that instead of failing.
        const auto paranoid = read_sysctl("kernel/perf_event_paranoid");
        if (user_only_ || !target_.per_task || !paranoid || *paranoid < 2 || !exclude_kernel(attrs)) throw;
        user_only_ = true;
        for (auto& sp : specs_)
            if (!sp.tracking) sp.name += sp.name.find(':') == std::string::npos ? ":u" : "u";  // perf's naming
        notes_.push_back("kernel.perf_event_paranoid=" + std::to_string(*paranoid) +
                         " allows this user user-space samples only: recording them (as perf does); run as root, "
                         "or set the sysctl to 1 or lower, for kernel samples");
        rings_ = open_rings(specs_, attrs, target_.cpus, target_.tids, target_.cgroups, data_pages);
    }
    sample_type_ = attrs.front().sample_type;
    attrs_ = attrs;
    data_pages_ = data_pages;
}

bool PerfSource::reopen(size_t ring) {
    if (!target_.tids.empty()) return false;  // new per-task events would not follow the tasks' children
    SourceRing& r = rings_.at(ring);
    std::vector<SourceRing> fresh = open_rings(specs_, attrs_, {r.cpu}, {}, target_.cgroups, data_pages_);
    // What the dead events lost goes into the end's counts (their LOST records are in the file).
    read_lost(r, retired_lost_);
    r = std::move(fresh.front());  // the dead events close, their ring unmaps
    for (auto& e : r.events)
        if (::ioctl(e.fd.get(), PERF_EVENT_IOC_ENABLE, 0) != 0)
            throw Error("PERF_EVENT_IOC_ENABLE on cpu " + std::to_string(r.cpu) + ": " + errno_text(errno));
    return true;
}

void PerfSource::start_tracking() {
    if (target_.at_exec) return;  // the command's tracking events start at its exec
    for (auto& r : rings_)
        for (auto& e : r.events)
            if (specs_[e.event_index].tracking && ::ioctl(e.fd.get(), PERF_EVENT_IOC_ENABLE, 0) != 0)
                throw Error("PERF_EVENT_IOC_ENABLE of the tracking event: " + errno_text(errno));
}

void PerfSource::synthesize(const RecordSink& sink, SynthesisStats& stats) {
    // Time 0 and id 0 (perf's "synthesized"), so perf processes them before any sample.
    const size_t id_size = sample_id_size(sample_type_);
    std::vector<IdIndexEntry> index;
    for (size_t i = 0; i < rings_.size(); ++i)
        for (const auto& e : rings_[i].events)
            index.push_back({e.id, i, uint64_t(int64_t(e.cpu)), uint64_t(int64_t(e.tid))});
    synthesize_id_index(sink, index, stats);
    synthesize_thread_map(sink, target_.tids, stats);
    synthesize_cpu_map(sink, target_.cpus, stats);
    synthesize_kernel(sink, id_size, stats);
    synthesize_bpf(sink, id_size, read_bpf_info(), stats);
    if (target_.at_exec) return;  // a command's COMM/MMAP records come from its own tracking events
    std::optional<std::vector<int>> pids;
    if (target_.per_task) pids = target_.synth_pids;
    synthesize_tasks(sink, id_size, pids, target_.data_maps, stats);
}

void PerfSource::enable() {
    if (target_.at_exec) return;  // enable_on_exec
    for (auto& r : rings_)
        for (auto& e : r.events)
            if (::ioctl(e.fd.get(), PERF_EVENT_IOC_ENABLE, 0) != 0)
                throw Error("PERF_EVENT_IOC_ENABLE failed: " + errno_text(errno));
}

void PerfSource::disable() {
    for (auto& r : rings_)
        for (auto& e : r.events) ::ioctl(e.fd.get(), PERF_EVENT_IOC_DISABLE, 0);
}

std::vector<LostReading> PerfSource::lost_counts() const {
    std::vector<LostReading> out = retired_lost_;
    for (const auto& r : rings_) read_lost(r, out);
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

}  // namespace ringcap
