// HEADER_BPF_PROG_INFO and HEADER_BPF_BTF: each loaded program's info as perf 6.1's
// get_bpf_prog_info_linear lays it out (two BPF_OBJ_GET_INFO_BY_FD calls: the counts, then the
// arrays into one buffer), and the raw BTF of the programs whose BTF perf fetches
// (perf_event__synthesize_one_bpf_prog: a BTF id with function info for every sub-program).
#include "ringcap/bpf_info.hpp"

#include <cstring>
#include <linux/bpf.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ringcap/sys.hpp"

namespace ringcap {

static_assert(sizeof(bpf_prog_info) >= kPerfBpfProgInfoLen, "the kernel headers predate perf 6.1's bpf_prog_info");

namespace {

long sys_bpf(int cmd, bpf_attr& attr) { return syscall(__NR_bpf, cmd, &attr, sizeof attr); }

// perf's bpil_array_desc, indexed by perf_bpil_array_types: where each array's pointer and element
// count are in bpf_prog_info, and its element size (negative: a fixed size; else the offset of the
// field holding it).
struct ArrayDesc {
    size_t array, count;
    int size;
};
constexpr ArrayDesc kArrays[] = {
    {offsetof(bpf_prog_info, jited_prog_insns), offsetof(bpf_prog_info, jited_prog_len), -1},
    {offsetof(bpf_prog_info, xlated_prog_insns), offsetof(bpf_prog_info, xlated_prog_len), -1},
    {offsetof(bpf_prog_info, map_ids), offsetof(bpf_prog_info, nr_map_ids), -4},
    {offsetof(bpf_prog_info, jited_ksyms), offsetof(bpf_prog_info, nr_jited_ksyms), -8},
    {offsetof(bpf_prog_info, jited_func_lens), offsetof(bpf_prog_info, nr_jited_func_lens), -4},
    {offsetof(bpf_prog_info, func_info), offsetof(bpf_prog_info, nr_func_info),
     int(offsetof(bpf_prog_info, func_info_rec_size))},
    {offsetof(bpf_prog_info, line_info), offsetof(bpf_prog_info, nr_line_info),
     int(offsetof(bpf_prog_info, line_info_rec_size))},
    {offsetof(bpf_prog_info, jited_line_info), offsetof(bpf_prog_info, nr_jited_line_info),
     int(offsetof(bpf_prog_info, jited_line_info_rec_size))},
    {offsetof(bpf_prog_info, prog_tags), offsetof(bpf_prog_info, nr_prog_tags), -BPF_TAG_SIZE},
};

// The info as perf 6.1 knows it: its first kPerfBpfProgInfoLen bytes.
struct Info {
    alignas(8) std::byte b[kPerfBpfProgInfoLen]{};
    template <typename T>
    T get(size_t off) const {
        T v;
        std::memcpy(&v, b + off, sizeof v);
        return v;
    }
    template <typename T>
    void set(size_t off, T v) {
        std::memcpy(b + off, &v, sizeof v);
    }
    uint32_t count(const ArrayDesc& d) const { return get<uint32_t>(d.count); }
    uint32_t elem(const ArrayDesc& d) const { return d.size < 0 ? uint32_t(-d.size) : get<uint32_t>(size_t(d.size)); }
};

bool get_info(int fd, void* info, uint32_t len) {
    bpf_attr attr{};
    attr.info.bpf_fd = uint32_t(fd);
    attr.info.info_len = len;
    attr.info.info = uint64_t(reinterpret_cast<uintptr_t>(info));
    return sys_bpf(BPF_OBJ_GET_INFO_BY_FD, attr) == 0;
}

uint64_t round8(uint64_t v) { return (v + 7) / 8 * 8; }

// One program's perf_bpil bytes, or empty if the kernel refused or its counts disagree (perf skips
// such a program too).
std::vector<std::byte> read_program(int fd, uint32_t* btf_id) {
    Info first;
    if (!get_info(fd, first.b, sizeof first.b)) return {};
    // Step 2 of get_bpf_prog_info_linear: each array rounded up to 8 bytes in one data block.
    uint64_t data_len = 0;
    for (size_t i = 0; i < std::size(kArrays); ++i)
        if (kPerfBpilArrays >> i & 1) data_len += round8(uint64_t(first.count(kArrays[i])) * first.elem(kArrays[i]));
    if (data_len > (64u << 20)) return {};
    Info info;
    std::vector<std::byte> data(data_len);
    uint64_t at = 0;
    for (size_t i = 0; i < std::size(kArrays); ++i) {
        if (!(kPerfBpilArrays >> i & 1)) continue;
        const ArrayDesc& d = kArrays[i];
        info.set<uint32_t>(d.count, first.count(d));
        if (d.size >= 0) info.set<uint32_t>(size_t(d.size), first.elem(d));
        info.set<uint64_t>(d.array, uint64_t(reinterpret_cast<uintptr_t>(data.data() + at)));
        at += round8(uint64_t(first.count(d)) * first.elem(d));
    }
    if (!get_info(fd, info.b, sizeof info.b)) return {};
    const ArrayDesc &ksyms = kArrays[3], &lens = kArrays[4], &tags = kArrays[8], &funcs = kArrays[5];
    const uint32_t subprogs = info.count(ksyms);
    if (subprogs != info.count(tags) || subprogs != info.count(lens)) return {};
    // In the file the array pointers are offsets into data (bpil_addr_to_offs).
    for (size_t i = 0; i < std::size(kArrays); ++i)
        if (kPerfBpilArrays >> i & 1)
            info.set<uint64_t>(kArrays[i].array,
                               info.get<uint64_t>(kArrays[i].array) - uint64_t(reinterpret_cast<uintptr_t>(data.data())));
    const uint32_t id = info.get<uint32_t>(offsetof(bpf_prog_info, btf_id));
    *btf_id = id && info.count(funcs) == subprogs && info.elem(funcs) ? id : 0;
    std::vector<std::byte> out(16 + sizeof info.b + data.size());
    const uint32_t head[2] = {kPerfBpfProgInfoLen, uint32_t(data.size())};
    std::memcpy(out.data(), head, sizeof head);
    std::memcpy(out.data() + 8, &kPerfBpilArrays, sizeof kPerfBpilArrays);
    std::memcpy(out.data() + 16, info.b, sizeof info.b);
    if (!data.empty()) std::memcpy(out.data() + 16 + sizeof info.b, data.data(), data.size());
    return out;
}

// The raw BTF of object `id` (what libbpf's btf__raw_data gives perf): its size, then its bytes.
std::vector<std::byte> read_btf(uint32_t id) {
    bpf_attr attr{};
    attr.btf_id = id;
    UniqueFd fd(int(sys_bpf(BPF_BTF_GET_FD_BY_ID, attr)));
    if (fd.get() < 0) return {};
    bpf_btf_info info{};
    if (!get_info(fd.get(), &info, sizeof info) || info.btf_size == 0 || info.btf_size > (64u << 20)) return {};
    std::vector<std::byte> raw(info.btf_size);
    bpf_btf_info again{};
    again.btf = uint64_t(reinterpret_cast<uintptr_t>(raw.data()));
    again.btf_size = info.btf_size;
    if (!get_info(fd.get(), &again, sizeof again) || again.btf_size != info.btf_size) return {};
    return raw;
}

}  // namespace

void BpfInfo::merge(const BpfInfo& other) {
    programs.insert(other.programs.begin(), other.programs.end());
    btfs.insert(other.btfs.begin(), other.btfs.end());
}

BpfInfo read_bpf_info() {
    BpfInfo out;
    uint32_t id = 0;
    for (;;) {
        bpf_attr next{};
        next.start_id = id;
        if (sys_bpf(BPF_PROG_GET_NEXT_ID, next) != 0) break;  // ENOENT: the last; EPERM: not allowed
        id = next.next_id;
        bpf_attr by_id{};
        by_id.prog_id = id;
        UniqueFd fd(int(sys_bpf(BPF_PROG_GET_FD_BY_ID, by_id)));
        if (fd.get() < 0) continue;  // unloaded meanwhile
        uint32_t btf_id = 0;
        auto prog = read_program(fd.get(), &btf_id);
        if (prog.empty()) continue;
        out.programs.emplace(id, std::move(prog));
        if (btf_id && !out.btfs.count(btf_id))
            if (auto raw = read_btf(btf_id); !raw.empty()) out.btfs.emplace(btf_id, std::move(raw));
    }
    return out;
}

std::vector<std::byte> bpf_prog_info_payload(const BpfInfo& info) {
    std::vector<std::byte> out(4);
    const uint32_t n = uint32_t(info.programs.size());
    std::memcpy(out.data(), &n, 4);
    for (const auto& [id, bytes] : info.programs) out.insert(out.end(), bytes.begin(), bytes.end());
    return out;
}

std::vector<std::byte> bpf_btf_payload(const BpfInfo& info) {
    std::vector<std::byte> out(4);
    const uint32_t n = uint32_t(info.btfs.size());
    std::memcpy(out.data(), &n, 4);
    for (const auto& [id, raw] : info.btfs) {
        const uint32_t head[2] = {id, uint32_t(raw.size())};
        const auto* h = reinterpret_cast<const std::byte*>(head);
        out.insert(out.end(), h, h + sizeof head);
        out.insert(out.end(), raw.begin(), raw.end());
    }
    return out;
}

}  // namespace ringcap
