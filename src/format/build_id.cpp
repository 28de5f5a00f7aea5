// HEADER_BUILD_ID: the GNU build-id of each DSO that was mapped executable during the record, so
// perf report finds the right binaries (and debuginfo) even after they changed on disk.
#include <algorithm>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include "ringcap/build_id_cache.hpp"
#include "ringcap/perf_data.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

std::optional<std::vector<uint8_t>> find_build_id_note(const unsigned char* p, size_t len) {
    size_t off = 0;
    while (off + sizeof(Elf64_Nhdr) <= len) {
        Elf64_Nhdr nh;
        std::memcpy(&nh, p + off, sizeof nh);
        off += sizeof nh;
        const size_t name_len = (nh.n_namesz + 3) & ~3u, desc_len = (nh.n_descsz + 3) & ~3u;
        if (off + name_len + desc_len > len) break;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(p + off, "GNU", 4) == 0 &&
            nh.n_descsz > 0 && nh.n_descsz <= 20)
            return std::vector<uint8_t>(p + off + name_len, p + off + name_len + nh.n_descsz);
        off += name_len + desc_len;
    }
    return std::nullopt;
}

std::optional<std::vector<uint8_t>> read_build_id(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return std::nullopt;
    Elf64_Ehdr eh;
    if (::pread(fd.get(), &eh, sizeof eh, 0) != ssize_t(sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 256)
        return std::nullopt;
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
        Elf64_Phdr ph;
        if (::pread(fd.get(), &ph, sizeof ph, off_t(eh.e_phoff + i * sizeof ph)) != ssize_t(sizeof ph)) break;
        if (ph.p_type != PT_NOTE || ph.p_filesz == 0 || ph.p_filesz > 65536) continue;
        std::vector<unsigned char> buf(ph.p_filesz);
        if (::pread(fd.get(), buf.data(), buf.size(), off_t(ph.p_offset)) != ssize_t(buf.size())) continue;
        if (auto id = find_build_id_note(buf.data(), buf.size())) return id;
    }
    return std::nullopt;
}

std::optional<std::vector<uint8_t>> kernel_build_id() {
    auto notes = read_text_file("/sys/kernel/notes");
    if (!notes) return std::nullopt;
    return find_build_id_note(reinterpret_cast<const unsigned char*>(notes->data()), notes->size());
}

std::vector<BuildIdEntry> collect_build_ids(const std::set<std::string>& dsos) {
    std::vector<BuildIdEntry> entries;
    if (auto k = kernel_build_id()) entries.push_back({"[kernel.kallsyms]", *k, true});
    if (auto v = current_vdso()) entries.push_back({"[vdso]", v->id, false});
    for (const auto& dso : dsos)
        if (auto id = read_build_id(dso)) entries.push_back({dso, *id, false});
    return entries;
}

std::vector<std::byte> build_build_id_feature(const std::vector<BuildIdEntry>& entries) {
    // perf's write_buildid(): header, BuildIdBody, name padded to 64.
    std::vector<std::byte> out;
    auto raw = [&out](const void* p, size_t n) {
        auto* b = static_cast<const std::byte*>(p);
        out.insert(out.end(), b, b + n);
    };
    for (const auto& e : entries) {
        const size_t len = (e.filename.size() + 1 + 63) / 64 * 64;
        const perf_event_header h{kRecordHeaderBuildId,
                                  uint16_t((e.kernel ? PERF_RECORD_MISC_KERNEL : PERF_RECORD_MISC_USER) |
                                           kMiscBuildIdSize),
                                  uint16_t(sizeof h + sizeof(BuildIdBody) + len)};
        BuildIdBody b{};
        b.pid = -1;  // host-wide DSO
        b.size = uint8_t(std::min<size_t>(e.id.size(), sizeof b.build_id));
        std::memcpy(b.build_id, e.id.data(), b.size);
        raw(&h, sizeof h);
        raw(&b, sizeof b);
        raw(e.filename.data(), e.filename.size());
        out.resize(out.size() + (len - e.filename.size()), std::byte{0});
    }
    return out;
}

}  // namespace ringcap
