// Tests: a BPF program of our own, with BTF, loaded for as long as the returned fds live: a socket
// filter "r0 = 0; exit" named ringcap_t, whose BTF (int, a prototype, FUNC ringcap_f) gives its one
// function a name of its own, as a compiled program's BTF does. Loaded with bpf(2), no libbpf.
#pragma once

#include <cerrno>
#include <cstring>
#include <linux/bpf.h>
#include <linux/btf.h>
#include <optional>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

#include "ringcap/sys.hpp"

namespace ringcap::testing {

struct LoadedBpf {
    UniqueFd btf, prog;
    uint32_t prog_id = 0, btf_id = 0;
    std::vector<std::byte> btf_raw;  // the BTF as loaded
};

inline long test_bpf(int cmd, bpf_attr& attr) { return syscall(__NR_bpf, cmd, &attr, sizeof attr); }

// The BTF: [1] int (32-bit signed), [2] FUNC_PROTO returning [1] without parameters, [3] FUNC
// "ringcap_f" of type [2], static.
inline std::vector<std::byte> test_btf() {
    const char strings[] = "\0int\0ringcap_f";  // "" at 0, "int" at 1, "ringcap_f" at 5
    std::vector<uint32_t> types = {
        1, uint32_t(BTF_KIND_INT) << 24, 4, (uint32_t(BTF_INT_SIGNED) << 24) | 32,
        0, uint32_t(BTF_KIND_FUNC_PROTO) << 24, 1,
        5, uint32_t(BTF_KIND_FUNC) << 24, 2,
    };
    btf_header h{};
    h.magic = BTF_MAGIC;
    h.version = BTF_VERSION;
    h.hdr_len = sizeof h;
    h.type_off = 0;
    h.type_len = uint32_t(types.size() * 4);
    h.str_off = h.type_len;
    h.str_len = sizeof strings;
    std::vector<std::byte> out(sizeof h + h.type_len + h.str_len);
    std::memcpy(out.data(), &h, sizeof h);
    std::memcpy(out.data() + sizeof h, types.data(), h.type_len);
    std::memcpy(out.data() + sizeof h + h.type_len, strings, sizeof strings);
    return out;
}

inline uint32_t object_id(int fd, bool btf) {
    bpf_prog_info prog{};
    bpf_btf_info b{};
    bpf_attr attr{};
    attr.info.bpf_fd = uint32_t(fd);
    attr.info.info_len = btf ? sizeof b : sizeof prog;
    attr.info.info = btf ? uint64_t(uintptr_t(&b)) : uint64_t(uintptr_t(&prog));
    if (test_bpf(BPF_OBJ_GET_INFO_BY_FD, attr) != 0) return 0;
    return btf ? b.id : prog.id;
}

// The program, or nullopt with the kernel's reason (no CAP_SYS_ADMIN/CAP_BPF, no BTF support).
inline std::optional<LoadedBpf> load_test_bpf(std::string* why) {
    LoadedBpf l;
    l.btf_raw = test_btf();
    char log[4096] = "";
    bpf_attr b{};
    b.btf = uint64_t(uintptr_t(l.btf_raw.data()));
    b.btf_size = uint32_t(l.btf_raw.size());
    b.btf_log_buf = uint64_t(uintptr_t(log));
    b.btf_log_size = sizeof log;
    b.btf_log_level = 1;
    l.btf = UniqueFd(int(test_bpf(BPF_BTF_LOAD, b)));
    if (l.btf.get() < 0) {
        *why = std::string("BPF_BTF_LOAD: ") + std::strerror(errno) + " " + log;
        return std::nullopt;
    }
    const bpf_insn insns[2] = {{BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0}, {BPF_JMP | BPF_EXIT, 0, 0, 0, 0}};
    const bpf_func_info func{0, 3};
    bpf_attr p{};
    p.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
    p.insn_cnt = 2;
    p.insns = uint64_t(uintptr_t(insns));
    p.license = uint64_t(uintptr_t("GPL"));
    std::strcpy(p.prog_name, "ringcap_t");
    p.prog_btf_fd = uint32_t(l.btf.get());
    p.func_info_rec_size = sizeof func;
    p.func_info = uint64_t(uintptr_t(&func));
    p.func_info_cnt = 1;
    p.log_level = 1;
    p.log_buf = uint64_t(uintptr_t(log));
    p.log_size = sizeof log;
    l.prog = UniqueFd(int(test_bpf(BPF_PROG_LOAD, p)));
    if (l.prog.get() < 0) {
        *why = std::string("BPF_PROG_LOAD: ") + std::strerror(errno) + " " + log;
        return std::nullopt;
    }
    l.prog_id = object_id(l.prog.get(), false);
    l.btf_id = object_id(l.btf.get(), true);
    return l;
}

}  // namespace ringcap::testing
