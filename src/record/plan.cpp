#include "ringcap/plan.hpp"

#include <algorithm>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ringcap {

namespace {

bool has_cap_ipc_lock() {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (syscall(SYS_capget, &hdr, data) != 0) return false;
    return data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32));
}

}  // namespace

HostLimits HostLimits::current() {
    HostLimits h;
    h.page_size = ringcap::page_size();
    h.can_lock_memory = has_cap_ipc_lock();
    if (auto rate = read_sysctl("kernel/perf_event_max_sample_rate"); rate && *rate > 0)
        h.max_sample_rate = uint64_t(*rate);
    return h;
}

size_t default_ring_pages(size_t rings, bool can_lock_memory, size_t page_size) {
    constexpr size_t kPerfDefault = 128;
    if (!can_lock_memory) return kPerfDefault;
    const size_t per_ring = (size_t(256) << 20) / std::max<size_t>(rings, 1) / page_size;
    size_t pages = kPerfDefault;
    while (pages * 2 <= std::min<size_t>(per_ring, 2048)) pages *= 2;
    return pages;
}

RecordPlan RecordPlan::make(const RecordOptions& opts, const RingSource& source, const HostLimits& host) {
    if (opts.sampling.use_freq && host.max_sample_rate && opts.sampling.freq > *host.max_sample_rate)
        throw Error("-F " + std::to_string(opts.sampling.freq) + " is above kernel.perf_event_max_sample_rate=" +
                    std::to_string(*host.max_sample_rate) + ": lower -F or raise the sysctl (sysctl -w " +
                    "kernel.perf_event_max_sample_rate=" + std::to_string(opts.sampling.freq) + ")");
    RecordPlan p(source);
    p.sampling_ = opts.sampling;
    p.page_size_ = host.page_size;
    const size_t rings = source.ring_count();
    p.ring_pages_given_ = opts.mmap_pages != 0;
    p.ring_pages_ = opts.mmap_pages ? opts.mmap_pages : default_ring_pages(rings, host.can_lock_memory, host.page_size);
    // Staging is what rides out a slow write before the rings start to fill (README, Performance:
    // 4 buffers lost samples at 10 kHz dwarf; 16 x 1 MiB did not).
    p.staging_buffers_ = opts.staging_buffers ? opts.staging_buffers : std::clamp<size_t>(rings + 2, 16, 64);
    p.staging_buffer_bytes_ = opts.staging_buffer_bytes;
    p.loop_.backend = source.level_triggered_ok() ? opts.backend : Backend::Uring;
    p.loop_.rings = unsigned(rings);
    p.loop_.writes_in_flight = unsigned(p.staging_buffers_);
    p.loop_.cq_entries = opts.cq_entries;
    return p;
}

SamplingConfig RecordPlan::sampling(size_t pages, std::string* note) const {
    SamplingConfig s = sampling_;
    const uint64_t ring_bytes = uint64_t(pages) * page_size_;
    // Measured at 10 kHz with dwarf stacks on busy CPUs (README, "Wake-up policy"): waking at a
    // quarter lost 0-11 samples per 3 s where the kernel's half lost 7-79, for twice the wake-ups.
    if (!s.wakeup_events && !s.wakeup_watermark) s.wakeup_watermark = uint32_t(ring_bytes / 4);
    if (s.wakeup_watermark > ring_bytes / 2) {
        // At or above the ring size it never fires: the ring fills, the kernel drops, and nothing
        // wakes us until the end. Half the ring is the largest useful value.
        if (note)
            *note = "--wakeup-watermark " + std::to_string(s.wakeup_watermark) + " is more than half the " +
                    std::to_string(ring_bytes) + "-byte ring; using " + std::to_string(ring_bytes / 2);
        s.wakeup_watermark = uint32_t(ring_bytes / 2);
    }
    return s;
}

std::vector<perf_event_attr> RecordPlan::attrs(size_t pages, std::string* note) const {
    const SamplingConfig s = sampling(pages, note);
    std::vector<perf_event_attr> out;
    for (const auto& spec : source_->specs()) out.push_back(source_->attr(spec, s));
    return out;
}

}  // namespace ringcap
