#include "ringcap/plan.hpp"
#include "ringcap/collector_thread.hpp"
#include "ringcap/encoder_thread.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>
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

std::optional<uint64_t> read_u64_file(const std::string& path) {
    auto text = read_text_file(path);
    if (!text || text->empty() || !std::isdigit(static_cast<unsigned char>((*text)[0]))) return std::nullopt;  // "max"
    return std::strtoull(text->c_str(), nullptr, 10);
}

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20) + " MiB"; }

}  // namespace

void read_memory_cgroup(HostLimits& h) {
    auto lines = read_text_file("/proc/self/cgroup");
    if (!lines) return;
    // "ID:controllers:/path": the memory controller's line on cgroup v1, "0::/path" on v2.
    std::string v1, v2;
    bool have_v1 = false, have_v2 = false;
    std::istringstream in(*lines);
    for (std::string line; std::getline(in, line);) {
        const auto a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        // Built in steps: GCC 12 at -O2 warns (-Wrestrict, a false positive) on "," + std::string&&.
        std::string ctrl = ",";
        ctrl.append(line, a + 1, b - a - 1);
        ctrl += ',';
        if (ctrl == ",,") v2 = line.substr(b + 1), have_v2 = true;
        else if (ctrl.find(",memory,") != std::string::npos) v1 = line.substr(b + 1), have_v1 = true;
    }
    std::string base, path, limit_name, usage_name;
    if (have_v1 && read_text_file("/sys/fs/cgroup/memory/memory.usage_in_bytes")) {
        base = "/sys/fs/cgroup/memory", path = v1, limit_name = "memory.limit_in_bytes", usage_name = "memory.usage_in_bytes";
    } else if (have_v2) {
        base = read_text_file("/sys/fs/cgroup/cgroup.controllers") ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified";
        path = v2, limit_name = "memory.max", usage_name = "memory.current";
    } else {
        return;
    }
    if (path == "/") path.clear();
    if (auto u = read_u64_file(base + path + "/" + usage_name)) h.memory_usage = *u;
    // The effective limit is the lowest on the way up to the hierarchy's root.
    for (std::string dir = path;; dir = dir.substr(0, dir.rfind('/'))) {
        const std::string file = base + dir + "/" + limit_name;
        if (auto v = read_u64_file(file); v && *v < (uint64_t(1) << 60) && (!h.memory_limit || *v < *h.memory_limit)) {
            h.memory_limit = *v;
            h.memory_limit_file = file;
        }
        if (dir.empty()) break;
    }
}

HostLimits HostLimits::current() {
    HostLimits h;
    h.page_size = ringcap::page_size();
    h.can_lock_memory = has_cap_ipc_lock();
    if (auto rate = read_sysctl("kernel/perf_event_max_sample_rate"); rate && *rate > 0)
        h.max_sample_rate = uint64_t(*rate);
    read_memory_cgroup(h);
    return h;
}

size_t default_ring_pages(size_t rings, bool can_lock_memory, size_t page_size) {
    // perf's 516 KiB without the privilege to lock more. With it, up to 32 MiB per ring within
    // 256 MiB for all: a ring holds what its CPU makes while its collector cannot run (100 ms at
    // 40 kHz dwarf; 8 MiB rings overflowed in stalls of about 35 ms on a 2-vCPU machine).
    constexpr size_t kPerfDefault = 128;
    if (!can_lock_memory) return kPerfDefault;
    const size_t per_ring = (size_t(256) << 20) / std::max<size_t>(rings, 1) / page_size;
    const size_t most = (size_t(32) << 20) / page_size;
    size_t pages = kPerfDefault;
    while (pages * 2 <= std::min(per_ring, most)) pages *= 2;
    return pages;
}

RecordPlan RecordPlan::make(const RecordOptions& opts, const RingSource& source, const HostLimits& host) {
    RecordPlan p(source);
    p.sampling_ = opts.sampling;
    if (p.sampling_.use_freq && host.max_sample_rate && p.sampling_.freq > *host.max_sample_rate) {
        if (opts.freq_given)
            throw Error("-F " + std::to_string(p.sampling_.freq) + " is above kernel.perf_event_max_sample_rate=" +
                        std::to_string(*host.max_sample_rate) + ": lower -F or raise the sysctl (sysctl -w " +
                        "kernel.perf_event_max_sample_rate=" + std::to_string(p.sampling_.freq) + ")");
        // As perf does: the default frequency yields to the sysctl.
        p.notes_.push_back("kernel.perf_event_max_sample_rate=" + std::to_string(*host.max_sample_rate) +
                           " is below the default -F " + std::to_string(p.sampling_.freq) + ": sampling at " +
                           std::to_string(*host.max_sample_rate) + " Hz");
        p.sampling_.freq = *host.max_sample_rate;
    }
    p.page_size_ = host.page_size;
    const size_t rings = source.ring_count();
    p.ring_pages_given_ = opts.mmap_pages != 0;
    p.ring_pages_ = opts.mmap_pages ? opts.mmap_pages : default_ring_pages(rings, host.can_lock_memory, host.page_size);
    // Staging holds what was drained while its writes are in flight: shared out among the
    // collectors (docs/performance.md, Staging).
    const uint64_t ring_bytes = uint64_t(p.ring_pages_) * host.page_size * rings;
    p.staging_buffers_ = opts.staging_buffers ? opts.staging_buffers
                                              : size_t(default_staging_bytes(ring_bytes) / opts.staging_buffer_bytes);
    // A flight recorder writes to memory, never waits for a disk, and is meant to run for days:
    // its staging (resident, beside the window) need only hold what the encoder has not taken yet,
    // two wake-ups' worth of each ring (flight_staging_bytes), not a disk's writes in flight.
    if (opts.flight_recorder_s > 0 && !opts.staging_buffers)
        p.staging_buffers_ = size_t(flight_staging_bytes(ring_bytes) / opts.staging_buffer_bytes);
    p.staging_buffer_bytes_ = opts.staging_buffer_bytes;
    if (host.memory_limit) p.fit_staging(opts, host, rings);
    p.loop_.backend = source.level_triggered_ok() ? opts.backend : Backend::Uring;
    p.loop_.rings = unsigned(rings);
    p.loop_.writes_in_flight = unsigned(p.staging_buffers_);
    p.loop_.cq_entries = opts.cq_entries;
    return p;
}

uint64_t RecordPlan::default_staging_bytes(uint64_t ring_bytes) {
    // A write's completion can take a quarter of a second when the disk queues a burst (40 kHz
    // dwarf on 2 busy vCPUs: up to 170-260 ms from submission to completion, at 240 MB/s per
    // collector): twice what the rings hold covers it while the rings take the rest. At least what
    // rode out slow writes with small rings, at most what 64 CPUs' rings hold.
    return std::clamp<uint64_t>(2 * ring_bytes, kMinStagingBytes, kMaxStagingBytes);
}

uint64_t RecordPlan::flight_staging_bytes(uint64_t ring_bytes) {
    // A ring wakes its collector at a quarter full: a collector's staging takes two such wake-ups
    // of each of its rings while the encoder compresses. With less (16 MiB for two 32 MiB rings,
    // 10 kHz dwarf on 2 busy CPUs) every wake-up filled it and back-pressure took zstd to -5; with
    // 8 MiB rings instead it held, but four times the wake-ups cost 25 % more CPU than -z to a file.
    return std::clamp<uint64_t>(ring_bytes / 2, kMinFlightStagingBytes, kMaxFlightStagingBytes);
}

namespace {
size_t collectors_for(const std::string& threads, size_t rings) {
    // As split_rings() will split them; for core, package and numa the most there can be.
    if (rings == 0) return 1;
    if (threads.empty()) return std::min(rings, kDefaultCollectors);
    if (std::all_of(threads.begin(), threads.end(), ::isdigit)) return std::clamp<size_t>(std::stoul(threads), 1, rings);
    return rings;
}
}  // namespace

uint64_t RecordPlan::staging_memory(size_t buffers, size_t bytes, int level, size_t collectors) {
    uint64_t m = uint64_t(buffers) * bytes;
    if (level > 0)
        m += collectors * compression_memory(level, std::max<size_t>(4, buffers / collectors), bytes);
    return m;
}

void RecordPlan::fit_staging(const RecordOptions& opts, const HostLimits& host, size_t rings) {
    // Staging is charged to the memory cgroup in full (io_uring pins registered buffers), and with
    // -z so are the encoded buffers and the encoder's scratch; going over the limit gets the record
    // killed without a word. Fit it, or refuse.
    const uint64_t limit = *host.memory_limit;
    const uint64_t room = limit > host.memory_usage + kMemoryHeadroom ? limit - host.memory_usage - kMemoryHeadroom : 0;
    const int level = opts.compression_level;
    const size_t collectors = collectors_for(opts.threads, rings);
    auto fits = [&](size_t count, size_t bytes) { return staging_memory(count, bytes, level, collectors) <= room; };
    if (fits(staging_buffers_, staging_buffer_bytes_)) return;
    const std::string why = "the memory cgroup limit is " + mib(limit) + " (" + host.memory_limit_file + "), " +
                            mib(host.memory_usage) + " of it in use";
    const std::string what = level > 0 ? " and what -z needs with it" : "";
    if (opts.staging_buffers)
        throw Error("--staging-buffers " + std::to_string(staging_buffers_) + " x " +
                    std::to_string(staging_buffer_bytes_ >> 10) + " KiB" + what + " does not fit: " + why +
                    ", and ringcap needs " + mib(kMemoryHeadroom) + " besides; give less staging or raise the limit");
    // As many full-size buffers as fit; if fewer than four, four smaller ones (they ride out a slow
    // write better than two big ones): the largest size at which four fit.
    size_t bytes = staging_buffer_bytes_, count = 4;
    if (!fits(4, bytes)) {
        size_t lo = kMinBufferBytes / kStagingAlign, hi = bytes / kStagingAlign;
        while (lo < hi) {
            const size_t mid = (lo + hi + 1) / 2;
            if (fits(4, mid * kStagingAlign)) lo = mid;
            else hi = mid - 1;
        }
        bytes = lo * kStagingAlign;
    }
    while (count < staging_buffers_ && fits(count + 1, bytes)) ++count;
    while (count > 2 && !fits(count, bytes)) --count;
    if (!fits(count, bytes))
        throw Error("not enough memory to record: " + why + "; ringcap needs " +
                    mib(kMemoryHeadroom + staging_memory(2, kMinBufferBytes, level, collectors)) +
                    " (raise memory.max / memory.limit_in_bytes, or record outside the container" +
                    (level > 0 ? ", or without -z" : "") + ")");
    notes_.push_back(why + ": staging " + std::to_string(count) + " x " + std::to_string(bytes >> 10) + " KiB instead of " +
                     std::to_string(staging_buffers_) + " x " + std::to_string(staging_buffer_bytes_ >> 10) + " KiB" +
                     (level > 0 ? " (with what -z needs besides: " + mib(staging_memory(count, bytes, level, collectors) -
                                                                      uint64_t(count) * bytes) + ")"
                                : ""));
    staging_buffers_ = count;
    staging_buffer_bytes_ = bytes;
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
