// The BPF programs loaded on the machine, as perf record describes them in HEADER_BPF_PROG_INFO and
// HEADER_BPF_BTF (perf 6.1: util/header.c write_bpf_prog_info and write_bpf_btf, util/bpf-utils.c
// get_bpf_prog_info_linear, util/bpf-event.c): what `perf report --header-only` lists and what perf
// annotates BPF code with. Read with the bpf(2) syscall, no libbpf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace ringcap {

// perf 6.1's sizeof(struct bpf_prog_info): the most it reads of a program's info (a larger info_len
// makes it reject the feature), whatever the kernel or the headers we build with know.
inline constexpr uint32_t kPerfBpfProgInfoLen = 232;

// The arrays of a program's info that perf asks for (perf_bpil_array_types bits): jited
// instructions, ksyms and function lengths, BTF function and line info, jited line info, tags.
inline constexpr uint64_t kPerfBpilArrays = (1u << 0) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6) | (1u << 7) |
                                            (1u << 8);

struct BpfInfo {
    // By program id: perf's struct perf_bpil as it is in the file ({u32 info_len, u32 data_len,
    // u64 arrays}, the program's bpf_prog_info with its array pointers turned into offsets into
    // data, then data).
    std::map<uint32_t, std::vector<std::byte>> programs;
    // By BTF id: the raw BTF of the programs' BTF objects (only those with BTF function info, as perf).
    std::map<uint32_t, std::vector<std::byte>> btfs;

    // Adds what `other` knows and this does not (ids are never reused, programs never change):
    // a program seen at the start and unloaded since stays described, as perf keeps it.
    void merge(const BpfInfo& other);
};

// Every BPF program loaded now (bpf(BPF_PROG_GET_NEXT_ID)); empty where the kernel refuses (without
// CAP_SYS_ADMIN, as for perf). Never throws for what the kernel refuses.
BpfInfo read_bpf_info();

// The payloads: u32 count, then the programs by id (perf_bpil each); u32 count, then per BTF object
// {u32 id, u32 size, raw BTF} by id.
std::vector<std::byte> bpf_prog_info_payload(const BpfInfo& info);
std::vector<std::byte> bpf_btf_payload(const BpfInfo& info);

}  // namespace ringcap
