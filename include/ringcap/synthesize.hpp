// What perf record synthesizes from /proc at start so samples of existing processes resolve to
// names and symbols: FORK (system-wide) and COMM per thread, MMAP2 per executable mapping, the kernel map and modules.
// Records carry an all-zero sample_id (id 0: perf's "synthesized" marker) sized for
// kDefaultSampleType's sample_id_all fields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ringcap {

// Receives each synthesized record (whole, 8-byte aligned).
using RecordSink = std::function<void(const void* record, size_t size)>;

struct SynthesisStats {
    size_t processes = 0;
    size_t threads = 0;
    size_t maps = 0;
    size_t records = 0;  // every record handed to the sink
    size_t bytes = 0;
    bool kernel_scanned = false;  // synthesize_kernel() ran
    bool kernel_map = false;      // false when /proc/kallsyms hides addresses (kptr_restrict)
    double seconds = 0;
};

// What perf record writes first, describing the record itself (no sample_id): PERF_RECORD_ID_INDEX
// (each event id's CPU index, CPU and thread), PERF_RECORD_THREAD_MAP (the tasks recorded; pid -1
// and no name for a system-wide capture) and PERF_RECORD_CPU_MAP.
struct IdIndexEntry {
    uint64_t id, idx, cpu, tid;
};
struct ThreadMapEntry {
    int64_t pid;
    char comm[16];
};
static_assert(sizeof(IdIndexEntry) == 32 && sizeof(ThreadMapEntry) == 24);
void synthesize_id_index(const RecordSink& sink, const std::vector<IdIndexEntry>& entries, SynthesisStats& stats);
void synthesize_thread_map(const RecordSink& sink, const std::vector<int>& tids, SynthesisStats& stats);
void synthesize_cpu_map(const RecordSink& sink, const std::vector<int>& cpus, SynthesisStats& stats);

// The kernel ([kernel.kallsyms]_text) and module maps.
void synthesize_kernel(const RecordSink& sink, size_t id_size, SynthesisStats& stats);
// FORK + COMM + MMAP2 for every process (nullopt), or COMM + MMAP2 for `pids`: executable mappings, and with `data_maps`
// also readable file mappings (PERF_RECORD_MISC_MMAP_DATA), which dwarf unwinding needs.
void synthesize_tasks(const RecordSink& sink, size_t id_size, const std::optional<std::vector<int>>& pids,
                      bool data_maps, SynthesisStats& stats);
// The MMAP2 records of one process from its maps file (`maps_path`, /proc/PID/maps): whole lines only,
// a path too long for PATH_MAX named "//toolong" as the kernel names it. `per_task`: a per-task
// capture (lists [vsyscall] too).
void synthesize_maps(const RecordSink& sink, size_t id_size, uint32_t pid, const std::string& maps_path,
                     bool data_maps, bool per_task, SynthesisStats& stats);

}  // namespace ringcap
