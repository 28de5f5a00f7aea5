#include "ringcap/sideband_state.hpp"

#include <algorithm>
#include <cstring>
#include <linux/perf_event.h>

#include "ringcap/records.hpp"

namespace ringcap {

namespace {

// kDefaultSampleType's sample_id after every non-sample record: {pid, tid}, time, {cpu, res}, id.
constexpr size_t kSampleId = 32;
constexpr size_t kTimeFromEnd = 24;

template <typename T>
T body(const std::vector<std::byte>& rec) {
    T b{};
    std::memcpy(&b, rec.data() + field::kBody, std::min(sizeof b, rec.size() - field::kBody));
    return b;
}

uint32_t type_of(const std::vector<std::byte>& rec) {
    perf_event_header h;
    std::memcpy(&h, rec.data(), sizeof h);
    return h.type;
}

// The range a MMAP or MMAP2 record maps, and its pid.
struct Range {
    uint32_t pid;
    uint64_t start, end;
};
Range range_of(const std::vector<std::byte>& rec) {
    if (type_of(rec) == PERF_RECORD_MMAP2) {
        const auto b = body<Mmap2Body>(rec);
        return {b.pid, b.addr, b.addr + b.len};
    }
    const auto b = body<MmapBody>(rec);
    return {b.pid, b.addr, b.addr + b.len};
}

// Names {pid, tid} as the task of a MMAP or MMAP2 record, in its body and in its sample_id.
void set_task(std::vector<std::byte>& rec, uint32_t pid, uint32_t tid) {
    const uint32_t task[2] = {pid, tid};
    std::memcpy(rec.data() + field::kBody, task, sizeof task);  // MmapBody and Mmap2Body start {pid, tid}
    std::memcpy(rec.data() + rec.size() - kSampleId, task, sizeof task);
}

std::string comm_of(const std::vector<std::byte>& rec) {
    const size_t at = field::kBody + sizeof(CommBody);
    const size_t end = rec.size() >= at + kSampleId ? rec.size() - kSampleId : rec.size();
    if (end <= at) return {};
    const char* s = reinterpret_cast<const char*>(rec.data() + at);
    return std::string(s, strnlen(s, end - at));
}

void append_comm(std::vector<std::byte>& out, uint32_t pid, uint32_t tid, const std::string& name) {
    const size_t text = (name.size() + 1 + 7) & ~size_t(7);  // NUL-terminated, 8-byte aligned
    const size_t size = sizeof(perf_event_header) + sizeof(CommBody) + text + kSampleId;
    const size_t at = out.size();
    out.resize(at + size);
    std::byte* p = out.data() + at;
    std::memset(p, 0, size);
    const perf_event_header h{PERF_RECORD_COMM, 0, uint16_t(size)};
    const CommBody b{pid, tid};
    std::memcpy(p, &h, sizeof h);
    std::memcpy(p + field::kBody, &b, sizeof b);
    std::memcpy(p + field::kBody + sizeof b, name.data(), name.size());
}

}  // namespace

bool SidebandState::wanted(uint32_t type) {
    return type == PERF_RECORD_COMM || type == PERF_RECORD_FORK || type == PERF_RECORD_EXIT ||
           type == PERF_RECORD_MMAP || type == PERF_RECORD_MMAP2;
}

void SidebandState::add(const std::byte* rec, size_t len) {
    perf_event_header h;
    if (len < sizeof h + kSampleId) return;
    std::memcpy(&h, rec, sizeof h);
    if (!wanted(h.type) || h.size != len) return;
    uint64_t t;
    std::memcpy(&t, rec + len - kTimeFromEnd, sizeof t);
    pending_.emplace(t, std::vector<std::byte>(rec, rec + len));
    bytes_ += len;
}

void SidebandState::fold(uint64_t t) { fold(t, t > kExitLagNs ? t - kExitLagNs : 0); }

void SidebandState::fold(uint64_t t, uint64_t exits) {
    for (auto it = pending_.begin(); it != pending_.end() && it->first <= t;) {
        if (type_of(it->second) == PERF_RECORD_EXIT && it->first > exits) {
            ++it;  // kept until `exits` passes it (by default kExitLagNs before the window's start)
            continue;
        }
        apply(it->second);
        bytes_ -= it->second.size();
        it = pending_.erase(it);
    }
}

void SidebandState::apply(const std::vector<std::byte>& rec) {
    switch (type_of(rec)) {
        case PERF_RECORD_COMM: {
            const auto b = body<CommBody>(rec);
            perf_event_header h;
            std::memcpy(&h, rec.data(), sizeof h);
            Process& p = procs_[b.pid];
            // exec: the old program's mappings are gone (its new ones follow).
            if (h.misc & PERF_RECORD_MISC_COMM_EXEC) {
                for (const auto& m : p.maps) bytes_ -= m.size();
                p.maps.clear();
            }
            p.threads[b.tid] = comm_of(rec);
            break;
        }
        case PERF_RECORD_FORK: {
            const auto b = body<ForkBody>(rec);
            const auto parent = procs_.find(b.ppid);
            Process& p = procs_[b.pid];
            std::string name;
            if (parent != procs_.end()) {
                const auto pt = parent->second.threads.find(b.ptid);
                name = pt != parent->second.threads.end() ? pt->second
                       : parent->second.threads.empty() ? std::string() : parent->second.threads.begin()->second;
                // A new process starts with its parent's mappings (copied before `p` could move them),
                // renamed to it: a record naming the parent would map nothing for the child in a file
                // that starts after the fork (its samples unresolved) and map the parent twice.
                if (b.pid != b.ppid && p.maps.empty())
                    for (const auto& m : parent->second.maps) {
                        p.maps.push_back(m);
                        set_task(p.maps.back(), b.pid, b.tid);
                        bytes_ += m.size();
                    }
            }
            p.threads[b.tid] = name;
            break;
        }
        case PERF_RECORD_EXIT: {
            const auto b = body<ForkBody>(rec);
            const auto it = procs_.find(b.pid);
            if (it == procs_.end()) break;
            it->second.threads.erase(b.tid);
            if (b.pid == b.tid || it->second.threads.empty()) {
                for (const auto& m : it->second.maps) bytes_ -= m.size();
                procs_.erase(it);
            }
            break;
        }
        case PERF_RECORD_MMAP:
        case PERF_RECORD_MMAP2: {
            const Range r = range_of(rec);
            if (r.pid == UINT32_MAX) {
                kernel_maps_.push_back(rec);
                bytes_ += rec.size();
            } else {
                add_map(procs_[r.pid], rec);
            }
            break;
        }
        default: break;
    }
}

void SidebandState::add_map(Process& p, const std::vector<std::byte>& rec) {
    // A mapping that replaces older ones entirely makes them moot (perf would drop them too); partial
    // overlaps stay, in order, for perf to resolve as it does with the live records.
    const Range r = range_of(rec);
    std::erase_if(p.maps, [&](const std::vector<std::byte>& m) {
        const Range o = range_of(m);
        const bool covered = o.start >= r.start && o.end <= r.end;
        if (covered) bytes_ -= m.size();
        return covered;
    });
    p.maps.push_back(rec);
    bytes_ += rec.size();
}

void SidebandState::emit(std::vector<std::byte>& out) const {
    for (const auto& m : kernel_maps_) out.insert(out.end(), m.begin(), m.end());
    for (const auto& [pid, p] : procs_) {
        for (const auto& [tid, name] : p.threads) append_comm(out, pid, tid, name);
        for (const auto& m : p.maps) out.insert(out.end(), m.begin(), m.end());
    }
}

void SidebandState::emit_gone(std::vector<std::byte>& out, const TaskSet& present) const {
    for (const auto& [pid, p] : procs_) {
        const auto first = present.lower_bound({pid, 0});
        const bool process_there = first != present.end() && first->first == pid;
        for (const auto& [tid, name] : p.threads)
            if (!present.count({pid, tid})) append_comm(out, pid, tid, name);
        if (!process_there)
            for (const auto& m : p.maps) out.insert(out.end(), m.begin(), m.end());
    }
}

size_t SidebandState::mappings() const {
    size_t n = kernel_maps_.size();
    for (const auto& [pid, p] : procs_) n += p.maps.size();
    return n;
}

}  // namespace ringcap
