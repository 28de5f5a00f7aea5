// HEADER_BUILD_ID: the GNU build-id of each DSO that samples hit (or, with --buildid-all, that was
// mapped executable), so perf report finds the right binaries (and debuginfo) even after they changed
// on disk. The files are opened as dso_files.hpp says.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ringcap/build_id_cache.hpp"
#include "ringcap/dir.hpp"
#include "ringcap/dso_files.hpp"
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

std::optional<std::vector<uint8_t>> read_build_id(int fd) {
    Elf64_Ehdr eh;
    if (::pread(fd, &eh, sizeof eh, 0) != ssize_t(sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 256)
        return std::nullopt;
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
        Elf64_Phdr ph;
        if (::pread(fd, &ph, sizeof ph, off_t(eh.e_phoff + i * sizeof ph)) != ssize_t(sizeof ph)) break;
        if (ph.p_type != PT_NOTE || ph.p_filesz == 0 || ph.p_filesz > 65536) continue;
        std::vector<unsigned char> buf(ph.p_filesz);
        if (::pread(fd, buf.data(), buf.size(), off_t(ph.p_offset)) != ssize_t(buf.size())) continue;
        if (auto id = find_build_id_note(buf.data(), buf.size())) return id;
    }
    return std::nullopt;
}

std::optional<std::vector<uint8_t>> read_build_id(const std::string& path) {
    struct stat st{};
    UniqueFd fd = open_untrusted_file(path, st);
    if (!fd) return std::nullopt;
    return read_build_id(fd.get());
}

std::optional<std::vector<uint8_t>> kernel_build_id() {
    auto notes = read_text_file("/sys/kernel/notes");
    if (!notes) return std::nullopt;
    return find_build_id_note(reinterpret_cast<const unsigned char*>(notes->data()), notes->size());
}

UniqueFd open_dso(const DsoRef& d, struct stat& st) {
    auto same = [&](const struct stat& s) {
        return !d.has_inode || (major(s.st_dev) == d.maj && minor(s.st_dev) == d.min && s.st_ino == d.ino);
    };
    // While the process lives, the mapped file itself (even if its path now names another file, or
    // none): needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE, which root has.
    if (d.pid != 0 && d.end > d.start) {
        char link[96];
        std::snprintf(link, sizeof link, "/proc/%u/map_files/%llx-%llx", d.pid, static_cast<unsigned long long>(d.start),
                      static_cast<unsigned long long>(d.end));
        UniqueFd fd = open_magic_link_file(link, st);
        if (fd && same(st)) return fd;
    }
    UniqueFd fd = open_untrusted_file(d.path, st);
    if (fd && !same(st)) {
        errno = ESTALE;
        return {};
    }
    return fd;
}

std::string dso_skip_reason(int err) {
    switch (err) {
        case ENOENT: return "no longer on disk";
        case ESTALE: return "another file has its name since it was mapped";
        case ELOOP: return "its path leads through a symlink now";
        case EINVAL: return "not a regular file now";
        case EWOULDBLOCK: return "another process holds a lease on it";
        case EOPNOTSUPP: return "not opened: /proc/self/fd is missing to re-open it safely (mount /proc)";
        case ETIMEDOUT: return "not reached in time";
        default: return errno_text(err);
    }
}

std::vector<BuildIdEntry> build_id_placeholders(const std::vector<DsoRef>& dsos) {
    std::vector<BuildIdEntry> out;
    out.push_back({"[kernel.kallsyms]", std::vector<uint8_t>(20), true, {}});
    out.push_back({"[vdso]", std::vector<uint8_t>(20), false, {}});
    for (const auto& d : dsos) out.push_back({d.path, std::vector<uint8_t>(20), false, d});
    return out;
}

BuildIdPass collect_build_ids(const std::vector<DsoRef>& dsos, std::chrono::milliseconds limit) {
    const auto t0 = std::chrono::steady_clock::now();
    // The worker fills `shared` under its mutex; what it did not reach in time is skipped.
    struct Shared {
        std::mutex mu;
        std::vector<DsoRef> dsos;
        BuildIdPass pass;
        size_t done = 0;
    };
    auto shared = std::make_shared<Shared>();
    shared->dsos = dsos;
    shared->pass.files = dsos.size();
    if (auto k = kernel_build_id()) shared->pass.entries.push_back({"[kernel.kallsyms]", *k, true, {}});
    if (auto v = current_vdso()) shared->pass.entries.push_back({"[vdso]", v->id, false, {}});
    const bool finished = run_bounded(
        [shared](const std::atomic<bool>& abandoned) {
            for (size_t i = 0; i < shared->dsos.size() && !abandoned.load(); ++i) {
                const DsoRef& d = shared->dsos[i];
                struct stat st{};
                UniqueFd fd = open_dso(d, st);
                const int err = fd ? 0 : errno;
                std::optional<std::vector<uint8_t>> id;
                if (fd) id = read_build_id(fd.get());
                std::lock_guard lock(shared->mu);
                BuildIdPass& p = shared->pass;
                if (err) {
                    ++p.skipped;
                    const bool refused = err == ELOOP || err == EINVAL || err == EOPNOTSUPP;
                    if (refused) ++p.refused;
                    if (p.first_skip.empty() || (refused && p.refused == 1))
                        p.first_skip = d.path + ": " + dso_skip_reason(err);
                } else if (id) {
                    p.entries.push_back({d.path, *id, false, d});
                }
                shared->done = i + 1;
            }
        },
        limit);
    std::lock_guard lock(shared->mu);
    BuildIdPass pass = shared->pass;  // a copy: the worker may still be running
    if (!finished) {
        pass.timed_out = true;
        pass.skipped += dsos.size() - shared->done;
        if (shared->done < dsos.size())
            pass.first_skip = dsos[shared->done].path + ": " + dso_skip_reason(ETIMEDOUT);
    }
    pass.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return pass;
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
