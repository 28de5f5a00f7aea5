#include "ringcap/synthesize.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <map>
#include <stddef.h>
#include <string_view>

#include "ringcap/records.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

namespace {

// PATH_MAX: the longest name the kernel puts in an MMAP2 record.
constexpr size_t kMaxPathChars = 4096;

// Builds one record in a fixed buffer: header, body, NUL-padded string, zero sample_id.
class RecordBuilder {
public:
    explicit RecordBuilder(size_t id_size) : id_size_(id_size) {}
    void begin(uint32_t type, uint16_t misc) {
        len_ = sizeof(perf_event_header);
        type_ = type;
        misc_ = misc;
    }
    template <typename T>
    void put(const T& v) {
        std::memcpy(buf_ + len_, &v, sizeof v);
        len_ += sizeof v;
    }
    void str(std::string_view s) {
        // NUL-terminated, padded to 8 bytes like the kernel's records.
        s = s.substr(0, kMaxPathChars - 1);
        std::memcpy(buf_ + len_, s.data(), s.size());
        size_t n = (s.size() + 1 + 7) & ~size_t(7);
        std::memset(buf_ + len_ + s.size(), 0, n - s.size());
        len_ += n;
    }
    void end(const RecordSink& sink, SynthesisStats& stats) {
        std::memset(buf_ + len_, 0, id_size_);
        len_ += id_size_;
        perf_event_header h{type_, misc_, uint16_t(len_)};
        std::memcpy(buf_, &h, sizeof h);
        sink(buf_, len_);
        ++stats.records;
        stats.bytes += len_;
    }

private:
    alignas(8) unsigned char buf_[kMaxPathChars + 256];
    size_t len_ = 0;
    size_t id_size_;
    uint32_t type_ = 0;
    uint16_t misc_ = 0;
};

std::vector<int> numeric_entries(const std::string& dir) {
    std::vector<int> out;
    DIR* d = opendir(dir.c_str());
    if (!d) return out;
    while (dirent* e = readdir(d)) {
        char* end = nullptr;
        long v = std::strtol(e->d_name, &end, 10);
        if (end && *end == 0 && v > 0) out.push_back(int(v));
    }
    closedir(d);
    return out;
}

std::string trim_newline(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

// The parent of a process from /proc/PID/status ("PPid:"), or 0.
uint32_t parent_of(const std::string& proc_dir) {
    const auto status = read_text_file(proc_dir + "/status");
    if (!status) return 0;
    const size_t at = status->find("\nPPid:");
    return at == std::string::npos ? 0 : uint32_t(std::strtoul(status->c_str() + at + 7, nullptr, 10));
}

// The kernel's COMM records hold TASK_COMM_LEN - 1 = 15 characters; /proc shows kernel threads'
// full names. perf cuts them the same way.
constexpr size_t kCommChars = 15;

}  // namespace

namespace {
// Emits `header + nr + entries` records, split as perf splits them so each fits a u16 size.
template <typename Entry>
void emit_list(const RecordSink& sink, uint32_t type, const std::vector<Entry>& entries, SynthesisStats& stats) {
    constexpr size_t kMaxEntries = (kMaxRecordBytes - sizeof(perf_event_header) - 8) / sizeof(Entry);
    std::vector<std::byte> rec;
    for (size_t from = 0; from < entries.size(); from += kMaxEntries) {
        const uint64_t nr = std::min(kMaxEntries, entries.size() - from);
        const perf_event_header h{type, 0, uint16_t(sizeof h + 8 + nr * sizeof(Entry))};
        rec.resize(h.size);
        std::memcpy(rec.data(), &h, sizeof h);
        std::memcpy(rec.data() + sizeof h, &nr, 8);
        std::memcpy(rec.data() + sizeof h + 8, entries.data() + from, nr * sizeof(Entry));
        sink(rec.data(), rec.size());
        ++stats.records;
        stats.bytes += rec.size();
    }
}
}  // namespace

void synthesize_id_index(const RecordSink& sink, const std::vector<IdIndexEntry>& entries, SynthesisStats& stats) {
    emit_list(sink, kRecordIdIndex, entries, stats);
}

void synthesize_thread_map(const RecordSink& sink, const std::vector<int>& tids, SynthesisStats& stats) {
    std::vector<ThreadMapEntry> entries;
    if (tids.empty()) entries.push_back({-1, {}});
    for (int tid : tids) {
        ThreadMapEntry e{tid, {}};
        const auto comm = read_text_file("/proc/" + std::to_string(tid) + "/comm");
        if (comm) std::strncpy(e.comm, trim_newline(*comm).c_str(), sizeof e.comm - 1);
        entries.push_back(e);
    }
    emit_list(sink, kRecordThreadMap, entries, stats);
}

void synthesize_cpu_map(const RecordSink& sink, const std::vector<int>& cpus, SynthesisStats& stats) {
    // { u16 type = PERF_CPU_MAP__CPUS (0); u16 nr; u16 cpu[nr] }, padded to 8 bytes: every perf reads it.
    std::vector<uint16_t> body{0, uint16_t(cpus.size())};
    for (int c : cpus) body.push_back(uint16_t(c));
    const size_t len = (sizeof(perf_event_header) + body.size() * 2 + 7) & ~size_t(7);
    if (len > kMaxRecordBytes) return;  // only informational; 32000 CPUs do not fit one record
    std::vector<std::byte> rec(len, std::byte{0});
    const perf_event_header h{kRecordCpuMap, 0, uint16_t(len)};
    std::memcpy(rec.data(), &h, sizeof h);
    std::memcpy(rec.data() + sizeof h, body.data(), body.size() * 2);
    sink(rec.data(), rec.size());
    ++stats.records;
    stats.bytes += rec.size();
}

void synthesize_kernel(const RecordSink& sink, size_t id_size, SynthesisStats& stats) {
    // perf's kernel map: PERF_RECORD_MMAP, pid -1, from _text to the top of the address space,
    // pgoff = _text, named "[kernel.kallsyms]_text"; perf report then reads /proc/kallsyms.
    stats.kernel_scanned = true;
    FILE* f = fopen("/proc/kallsyms", "r");
    if (!f) return;
    unsigned long long text = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long long addr;
        char type, name[256];
        if (sscanf(line, "%llx %c %255s", &addr, &type, name) == 3 && strcmp(name, "_text") == 0) {
            text = addr;
            break;
        }
    }
    fclose(f);
    RecordBuilder b(id_size);
    if (text != 0) {
        b.begin(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL);
        b.put(MmapBody{uint32_t(-1) /* the host kernel */, 0, text, ~0ull - text, text});
        b.str("[kernel.kallsyms]_text");
        b.end(sink, stats);
        stats.kernel_map = true;
    }
    // Modules: "name size refcount deps state address".
    FILE* m = fopen("/proc/modules", "r");
    if (!m) return;
    while (fgets(line, sizeof line, m)) {
        char name[256];
        unsigned long long size = 0, addr = 0;
        if (sscanf(line, "%255s %llu %*s %*s %*s %llx", name, &size, &addr) != 3 || addr == 0) continue;
        b.begin(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL);
        b.put(MmapBody{uint32_t(-1), 0, addr, size, 0});
        b.str(std::string("[") + name + "]");
        b.end(sink, stats);
    }
    fclose(m);
}

void synthesize_maps(const RecordSink& sink, size_t id_size, uint32_t pid, const std::string& maps_path,
                     bool data_maps, bool per_task, SynthesisStats& stats) {
    FILE* f = fopen(maps_path.c_str(), "re");
    if (!f) return;
    RecordBuilder b(id_size);
    char* line = nullptr;
    size_t cap = 0;
    // Whole lines of any length (getline): a fixed buffer would split a long path into a second
    // "line" that its owner chose, naming any file for root to open later.
    for (ssize_t n; (n = getline(&line, &cap, f)) > 0;) {
        if (line[n - 1] != '\n') break;  // the last line was cut short (the process changed meanwhile)
        line[n - 1] = 0;
        // "start-end perms offset major:minor inode path".
        unsigned long long start, end, off, ino;
        unsigned maj, min;
        char perms[8];
        int path_at = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &off, &maj, &min, &ino,
                   &path_at) < 7)
            continue;
        uint16_t misc = PERF_RECORD_MISC_USER;
        std::string path = trim_newline(line + path_at);
        if (perms[2] != 'x') {
            // Code resolves samples; data maps only matter to dwarf unwinding (file-backed ones).
            if (!data_maps || perms[0] != 'r' || path.empty() || path[0] != '/') continue;
            misc |= PERF_RECORD_MISC_MMAP_DATA;
        }
        if (path.empty()) path = "//anon";
        // As the kernel names a mapping whose path does not fit PATH_MAX in its own MMAP2 records.
        if (path.size() >= kMaxPathChars) path = "//toolong";
        if (path == "[vsyscall]" && !per_task) continue;  // as perf: only per-task captures list it
        uint32_t prot = (perms[0] == 'r' ? 1u : 0u) | (perms[1] == 'w' ? 2u : 0u) | 4u;  // PROT_*
        uint32_t flags = perms[3] == 's' ? 1u : 2u;  // MAP_SHARED / MAP_PRIVATE
        b.begin(PERF_RECORD_MMAP2, misc);
        b.put(Mmap2Body{pid, pid, start, end - start, off, maj, min, ino, 0, prot, flags});
        b.str(path);
        b.end(sink, stats);
        ++stats.maps;
    }
    free(line);
    fclose(f);
}

void synthesize_tasks(const RecordSink& sink, size_t id_size, const std::optional<std::vector<int>>& pids,
                      bool data_maps, SynthesisStats& stats) {
    const auto t0 = std::chrono::steady_clock::now();
    RecordBuilder b(id_size);
    const std::vector<int> procs = pids ? *pids : numeric_entries("/proc");
    for (int pid : procs) {
        const std::string base = "/proc/" + std::to_string(pid);
        std::vector<int> tids = numeric_entries(base + "/task");
        if (tids.empty()) continue;  // exited meanwhile
        ++stats.processes;
        // A system-wide capture gets each thread's parent as perf writes it (the main thread's parent
        // from /proc, the others' the main thread), so readers see the task tree; per-task ones do not.
        const uint32_t ppid = pids ? 0 : parent_of(base);
        for (int tid : tids) {
            auto comm = read_text_file(base + "/task/" + std::to_string(tid) + "/comm");
            if (!comm) continue;
            if (!pids) {
                const uint32_t parent = tid == pid ? ppid : uint32_t(pid);
                b.begin(PERF_RECORD_FORK, kMiscForkExec);
                b.put(ForkBody{uint32_t(pid), parent, uint32_t(tid), parent, 0});
                b.end(sink, stats);
            }
            b.begin(PERF_RECORD_COMM, 0);
            b.put(CommBody{uint32_t(pid), uint32_t(tid)});
            b.str(trim_newline(*comm).substr(0, kCommChars));
            b.end(sink, stats);
            ++stats.threads;
        }
        synthesize_maps(sink, id_size, uint32_t(pid), base + "/maps", data_maps, pids.has_value(), stats);
    }
    stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void synthesize_bpf(const RecordSink& sink, size_t id_size, const BpfInfo& bpf, SynthesisStats& stats) {
    if (bpf.programs.empty()) return;
    // The kernel's names of the jited functions, by address ("ADDR t bpf_prog_<tag>_<name>\t[bpf]").
    std::map<uint64_t, std::string> names;
    if (FILE* f = fopen("/proc/kallsyms", "r")) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (!strstr(line, "\t[bpf]")) continue;
            unsigned long long addr = 0;
            char type = 0, name[256];
            if (sscanf(line, "%llx %c %255s", &addr, &type, name) == 3 && addr) names[addr] = name;
        }
        fclose(f);
    }
    RecordBuilder b(id_size);
    for (const auto& [id, p] : bpf.programs) {
        // perf_bpil: {info_len, data_len, arrays}, the info (array fields are offsets into data), data.
        const std::byte* info = p.data() + 16;
        const std::byte* data = info + kPerfBpfProgInfoLen;
        const size_t data_len = p.size() - 16 - kPerfBpfProgInfoLen;
        auto u32 = [&](size_t off) { uint32_t v; std::memcpy(&v, info + off, 4); return v; };
        auto u64 = [&](size_t off) { uint64_t v; std::memcpy(&v, info + off, 8); return v; };
        const uint32_t subprogs = u32(offsetof(bpf_prog_info, nr_jited_ksyms));
        const uint64_t addrs = u64(offsetof(bpf_prog_info, jited_ksyms)),
                       lens = u64(offsetof(bpf_prog_info, jited_func_lens)), tags = u64(offsetof(bpf_prog_info, prog_tags));
        if (addrs + subprogs * 8ull > data_len || lens + subprogs * 4ull > data_len ||
            tags + subprogs * uint64_t(BPF_TAG_SIZE) > data_len)
            continue;
        const char* prog_name = reinterpret_cast<const char*>(info + offsetof(bpf_prog_info, name));
        for (uint32_t i = 0; i < subprogs; ++i) {
            uint64_t addr;
            uint32_t len;
            std::memcpy(&addr, data + addrs + 8 * i, 8);
            std::memcpy(&len, data + lens + 4 * i, 4);
            std::string name;
            if (auto it = names.find(addr); it != names.end()) {
                name = it->second;
            } else {  // perf's synthesize_bpf_prog_name without BTF
                char hex[2 * BPF_TAG_SIZE + 1];
                for (int k = 0; k < BPF_TAG_SIZE; ++k)
                    snprintf(hex + 2 * k, 3, "%02x", unsigned(data[tags + BPF_TAG_SIZE * i + size_t(k)]));
                // (appended piece by piece: GCC 12 at -O3 warns, wrongly, of "literal" + string)
                name = "bpf_prog_";
                name += hex;
                if (subprogs > 1) {
                    name += "_F";
                } else if (prog_name[0]) {
                    name += '_';
                    name.append(prog_name, strnlen(prog_name, BPF_OBJ_NAME_LEN));
                }
            }
            b.begin(PERF_RECORD_KSYMBOL, 0);
            b.put(addr);
            b.put(len);
            b.put(uint16_t(PERF_RECORD_KSYMBOL_TYPE_BPF));
            b.put(uint16_t(0));
            b.str(name);
            b.end(sink, stats);
        }
        b.begin(PERF_RECORD_BPF_EVENT, 0);
        b.put(uint16_t(PERF_BPF_EVENT_PROG_LOAD));
        b.put(uint16_t(0));
        b.put(id);
        std::array<std::byte, BPF_TAG_SIZE> tag;
        std::memcpy(tag.data(), info + offsetof(bpf_prog_info, tag), tag.size());
        b.put(tag);
        b.end(sink, stats);
    }
}

}  // namespace ringcap
