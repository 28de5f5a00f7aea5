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

#include "ringcap/bpf_info.hpp"

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
// The BPF programs loaded at the start, as perf_event__synthesize_bpf_events writes them: a
// PERF_RECORD_KSYMBOL per jited function (its address, length and name) and a PERF_RECORD_BPF_EVENT
// (PROG_LOAD, id, tag) per program, so that samples in them resolve and perf finds their
// HEADER_BPF_PROG_INFO. Names as the kernel gives them in /proc/kallsyms (bpf_prog_<tag>_<function>,
// the function's name from the program's BTF), perf's own rule where kallsyms lacks the address.
void synthesize_bpf(const RecordSink& sink, size_t id_size, const BpfInfo& bpf, SynthesisStats& stats);
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
