#include "ringcap/build_id_cache.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ringcap/sys.hpp"

namespace ringcap {

namespace {

std::string hex(const std::vector<uint8_t>& id) {
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (uint8_t b : id) {
        s += digits[b >> 4];
        s += digits[b & 15];
    }
    return s;
}

// mkdir -p; true if `path` is a directory afterwards.
bool make_dirs(const std::string& path) {
    for (size_t at = 1; at != std::string::npos; at = path.find('/', at + 1))
        ::mkdir(path.substr(0, at).c_str(), 0755);
    ::mkdir(path.c_str(), 0755);
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Writes `to` from `fd` (whole file) or from memory, under a temporary name renamed into place, so
// a reader never sees half a binary.
int write_copy(const std::string& to, int from_fd, std::span<const std::byte> from_mem, uint64_t& copied) {
    const std::string tmp = to + ".ringcap-tmp";
    UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!out) return errno;
    int err = 0;
    if (from_fd >= 0) {
        for (;;) {
            const ssize_t n = ::sendfile(out.get(), from_fd, nullptr, 1 << 30);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) err = errno;
            if (n <= 0) break;
            copied += uint64_t(n);
        }
    } else {
        for (size_t done = 0; done < from_mem.size() && !err;) {
            const ssize_t n = ::write(out.get(), from_mem.data() + done, from_mem.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) err = n < 0 ? errno : EIO;
            else done += size_t(n);
        }
        copied += from_mem.size();
    }
    if (!err && ::rename(tmp.c_str(), to.c_str()) != 0) err = errno;
    if (err) ::unlink(tmp.c_str());
    return err;
}

}  // namespace

std::string default_build_id_cache_dir() {
    const char* home = std::getenv("HOME");
    return home && *home ? std::string(home) + "/.debug" : std::string();
}

std::optional<VdsoImage> current_vdso() {
    // The mapping's extent from /proc/self/maps (as perf copies it); its build-id from its notes.
    const auto maps = read_text_file("/proc/self/maps");
    if (!maps) return std::nullopt;
    const size_t at = maps->find("[vdso]");
    if (at == std::string::npos) return std::nullopt;
    const size_t line = maps->rfind('\n', at) == std::string::npos ? 0 : maps->rfind('\n', at) + 1;
    unsigned long long start = 0, end = 0;
    if (std::sscanf(maps->c_str() + line, "%llx-%llx", &start, &end) != 2 || end <= start) return std::nullopt;
    if (getauxval(AT_SYSINFO_EHDR) != start) return std::nullopt;
    const auto* base = reinterpret_cast<const unsigned char*>(uintptr_t(start));
    Elf64_Ehdr eh;
    std::memcpy(&eh, base, sizeof eh);
    if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return std::nullopt;
    const size_t size = size_t(end - start);
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
        Elf64_Phdr ph;
        if (eh.e_phoff + (i + 1) * sizeof ph > size) break;
        std::memcpy(&ph, base + eh.e_phoff + i * sizeof ph, sizeof ph);
        if (ph.p_type != PT_NOTE || ph.p_offset + ph.p_filesz > size) continue;
        if (auto id = find_build_id_note(base + ph.p_offset, ph.p_filesz))
            return VdsoImage{{reinterpret_cast<const std::byte*>(base), size}, *id};
    }
    return std::nullopt;
}

BuildIdCacheStats add_to_build_id_cache(const std::string& dir, const std::vector<BuildIdEntry>& entries) {
    BuildIdCacheStats st;
    const auto t0 = std::chrono::steady_clock::now();
    auto fail = [&](const std::string& what, int err) {
        ++st.failed;
        if (st.error.empty()) st.error = what + ": " + errno_text(err);
    };
    if (dir.empty()) return st;
    std::optional<VdsoImage> vdso;
    for (const auto& e : entries) {
        if (e.id.empty()) continue;
        const std::string id = hex(e.id);
        // "[kernel.kallsyms]" and "[vdso]" sit at the top, paths below their absolute name.
        const bool special = !e.filename.empty() && e.filename[0] == '[';
        if (!special && (e.filename.empty() || e.filename[0] != '/')) continue;
        const std::string rel = (special ? "/" : "") + e.filename + "/" + id;
        const std::string entry_dir = dir + rel;
        const std::string file = entry_dir + (e.kernel ? "/kallsyms" : e.filename == "[vdso]" ? "/vdso" : "/elf");
        struct stat st_file{};
        if (::stat(file.c_str(), &st_file) == 0) {
            ++st.present;
            continue;
        }
        if (!make_dirs(entry_dir)) {
            fail("creating " + entry_dir, errno);
            continue;
        }
        int err = 0;
        if (e.kernel) {
            // /proc files report size 0: read as text, not with sendfile.
            const std::string text = read_text_file("/proc/kallsyms").value_or("");
            err = text.empty() ? EIO
                               : write_copy(file, -1, {reinterpret_cast<const std::byte*>(text.data()), text.size()},
                                            st.bytes_copied);
        } else if (e.filename == "[vdso]") {
            if (!vdso) vdso = current_vdso();
            err = vdso && vdso->id == e.id ? write_copy(file, -1, vdso->bytes, st.bytes_copied) : ENOENT;
        } else if (read_build_id(e.filename) != e.id) {
            err = ESTALE;  // the file on disk is no longer the one that ran
        } else if (::link(e.filename.c_str(), file.c_str()) == 0) {
            ++st.linked;  // same filesystem: no copy (perf does the same)
        } else {
            UniqueFd in(::open(e.filename.c_str(), O_RDONLY | O_CLOEXEC));
            err = !in ? errno : write_copy(file, in.get(), {}, st.bytes_copied);
        }
        if (err) {
            fail("caching " + e.filename, err);
            continue;
        }
        const std::string link_dir = dir + "/.build-id/" + id.substr(0, 2);
        const std::string link = link_dir + "/" + id.substr(2);
        if (make_dirs(link_dir)) {
            ::unlink(link.c_str());
            if (::symlink(("../.." + rel).c_str(), link.c_str()) != 0) fail("linking " + link, errno);
        }
        ++st.added;
    }
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return st;
}

}  // namespace ringcap
