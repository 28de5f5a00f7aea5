#include "ringcap/build_id_cache.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <sys/auxv.h>
#include <memory>
#include <mutex>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <utility>

#include "ringcap/dso_files.hpp"
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

// What a copy writes between two looks at `abandoned`: a pass given up on stops within one chunk.
constexpr size_t kCopyChunk = 4u << 20;

// Writes `name` in `dir` from `from_fd` (its first `size` bytes) or from memory, nameless until
// complete (a reader never sees half a binary), with `mode`, counting into `copied` as it goes.
// 0, or errno (EEXIST: another record added it meanwhile; ECANCELED: `abandoned`, the copy dropped).
int write_copy(const Dir& dir, const char* name, int from_fd, uint64_t size, std::span<const std::byte> from_mem,
               mode_t mode, uint64_t& copied, const std::atomic<bool>& abandoned) {
    NewFile out = dir.create(name, mode);
    if (!out) return errno;
    ::fchmod(out.fd(), mode);  // exactly: never more readable than the source, whatever the umask
    if (from_fd >= 0) {
        // The size it had when checked against the limits, not whatever it grows to meanwhile.
        off_t at = 0;
        while (uint64_t(at) < size) {
            if (abandoned.load()) return ECANCELED;
            const ssize_t n = ::sendfile(out.fd(), from_fd, &at, size_t(std::min<uint64_t>(size - uint64_t(at), kCopyChunk)));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return errno;
            if (n == 0) break;  // shorter now: what there is
            copied += uint64_t(n);
        }
    } else {
        for (size_t done = 0; done < from_mem.size();) {
            if (abandoned.load()) return ECANCELED;
            const ssize_t n = ::write(out.fd(), from_mem.data() + done, std::min(from_mem.size() - done, kCopyChunk));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return n < 0 ? errno : EIO;
            done += size_t(n);
            copied += uint64_t(n);
        }
    }
    return dir.link(out, name);
}

// Room for one copy in the record's budget (BuildIdCacheLimits::copied), taken before it starts:
// given back when the copy fails or is dropped, less what it kept when it is linked.
class Room {
public:
    Room() = default;
    Room(std::atomic<uint64_t>* used, uint64_t size) : used_(used), size_(size) {}
    Room(Room&& o) noexcept : used_(std::exchange(o.used_, nullptr)), size_(o.size_), kept_(o.kept_) {}
    Room& operator=(Room&& o) noexcept {
        std::swap(used_, o.used_);
        std::swap(size_, o.size_);
        std::swap(kept_, o.kept_);
        return *this;
    }
    ~Room() {
        if (used_) used_->fetch_sub(size_ - kept_);
    }
    explicit operator bool() const { return used_ != nullptr; }
    void keep(uint64_t n) { kept_ = std::min(n, size_); }

private:
    std::atomic<uint64_t>* used_ = nullptr;
    uint64_t size_ = 0, kept_ = 0;
};

std::string owner_text(const struct stat& st) {
    return "owned by uid " + std::to_string(st.st_uid) + ", mode " + [&] {
        char m[8];
        std::snprintf(m, sizeof m, "%04o", unsigned(st.st_mode & 07777));
        return std::string(m);
    }();
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

Dir open_build_id_cache(const std::string& path, std::string* why) {
    const uid_t me = ::geteuid();
    std::string name;
    Dir parent = Dir::open_parent(path, &name);
    if (!parent) {
        *why = "cannot open " + parent.path() + ": " + errno_text(errno);
        return {};
    }
    struct stat st{};
    Dir cache = parent.sub(name);
    if (!cache && errno == ENOENT) {
        // Made only where nobody else can swap it: in a directory of this user's own.
        if (parent.stat(st) != 0 || st.st_uid != me || (st.st_mode & 022)) {
            *why = parent.path() + " is " + owner_text(st) + " (ringcap runs as uid " + std::to_string(me) +
                   "): no build-id cache is made in a directory another user controls (give ringcap its own HOME, "
                   "e.g. sudo -H, or -N to skip the cache)";
            return {};
        }
        cache = parent.sub(name, true, 0755);
    }
    if (!cache) {
        const int err = errno;
        *why = path + (err == ELOOP || err == ENOTDIR ? std::string(" is a symlink or not a directory") : ": " + errno_text(err)) +
               " (-N skips the build-id cache)";
        return {};
    }
    if (cache.stat(st) != 0 || st.st_uid != me || (st.st_mode & 022)) {
        *why = path + " is " + owner_text(st) + ": ringcap (uid " + std::to_string(me) +
               ") writes a build-id cache only into a directory of its user's that nobody else can write "
               "(chown/chmod it, give ringcap its own HOME, or -N)";
        return {};
    }
    return cache;
}

namespace {

// One pass over the entries, on the worker thread (add_to_build_id_cache).
class CacheFiller {
public:
    CacheFiller(const Dir& root, const BuildIdCacheLimits& limits, BuildIdCacheStats& st, const std::atomic<bool>& abandoned)
        : root_(root), limits_(limits), st_(st), abandoned_(abandoned) {
        struct stat rs{};
        root_dev_ = root_.stat(rs) == 0 ? rs.st_dev : 0;
    }

    void add(const BuildIdEntry& e) {
        const std::string id = hex(e.id);
        // "[kernel.kallsyms]" and "[vdso]" sit at the top, paths below their absolute name.
        const bool special = !e.filename.empty() && e.filename[0] == '[';
        if (e.id.empty() || (!special && (e.filename.empty() || e.filename[0] != '/'))) return;
        const std::string rel = (special ? e.filename : e.filename.substr(1)) + "/" + id;
        const char* file = e.kernel ? "kallsyms" : e.filename == "[vdso]" ? "vdso" : "elf";
        struct stat present{};
        if (Dir there = root_.beneath(rel); there && there.stat_at(file, present) == 0) {
            ++st_.present;
            return;
        }
        bool linked = false;
        const int err = e.kernel ? add_kallsyms(rel, file)
                        : special ? add_vdso(e, rel, file)
                                  : add_file(e, rel, file, linked);
        if (err == EEXIST) {
            ++st_.present;  // another record added it meanwhile
            return;
        }
        if (err) {
            fail("caching " + e.filename + (err == EFBIG ? " (over the cache's size limits)" : ""), err);
            return;
        }
        const std::string name = id.substr(2);
        if (Dir links = root_.beneath(".build-id/" + id.substr(0, 2), true)) {
            links.unlink(name);
            if (::symlinkat(("../../" + rel).c_str(), links.fd(), name.c_str()) != 0) fail("linking " + links.path_of(name), errno);
        }
        ++st_.added;
        st_.linked += linked;
    }

private:
    void fail(const std::string& what, int err) {
        ++st_.failed;
        if (st_.error.empty()) st_.error = what + ": " + errno_text(err);
    }

    // The entry's directory, made below the cache (no symlink followed on the way): 0 or errno.
    int make_entry(const std::string& rel, Dir& entry) {
        entry = root_.beneath(rel, true);
        return entry ? 0 : errno;
    }

    // Room for a copy of `size` bytes, if it stays within the limits (and leaves the filesystem its
    // room): taken from the record's budget at once, so that no other pass counts on it meanwhile.
    Room fits(uint64_t size) const {
        struct statvfs fs{};
        if (size > limits_.max_file) return {};
        if (::fstatvfs(root_.fd(), &fs) == 0 &&
            double(fs.f_bavail) * double(fs.f_frsize) - double(size) < limits_.keep_free * double(fs.f_blocks) * double(fs.f_frsize))
            return {};
        std::atomic<uint64_t>& used = *limits_.copied;
        uint64_t now = used.load();
        do {
            if (now + size > limits_.max_total) return {};
        } while (!used.compare_exchange_weak(now, now + size));
        return Room(&used, size);
    }

    // Copies into the entry's file, within `room`: 0 or errno.
    int copy(const Dir& entry, const char* file, int from_fd, uint64_t size, std::span<const std::byte> mem, mode_t mode,
             Room& room) {
        uint64_t copied = 0;
        const int err = write_copy(entry, file, from_fd, size, mem, mode, copied, abandoned_);
        if (err == 0) {
            room.keep(copied);
            st_.bytes_copied += copied;
        }
        return err;
    }

    int add_kallsyms(const std::string& rel, const char* file) {
        // /proc files report size 0: read as text. Real addresses: for the cache's user only.
        const std::string text = read_text_file("/proc/kallsyms").value_or("");
        if (text.empty()) return EIO;
        Room room = fits(text.size());
        if (!room) return ++st_.over_limit, EFBIG;
        Dir entry;
        if (const int err = make_entry(rel, entry)) return err;
        return copy(entry, file, -1, 0, {reinterpret_cast<const std::byte*>(text.data()), text.size()}, 0600, room);
    }

    int add_vdso(const BuildIdEntry& e, const std::string& rel, const char* file) {
        if (!vdso_) vdso_ = current_vdso();
        if (!vdso_ || vdso_->id != e.id) return ENOENT;
        Room room = fits(vdso_->bytes.size());
        if (!room) return ++st_.over_limit, EFBIG;
        Dir entry;
        if (const int err = make_entry(rel, entry)) return err;
        return copy(entry, file, -1, 0, vdso_->bytes, 0644, room);
    }

    int add_file(const BuildIdEntry& e, const std::string& rel, const char* file, bool& linked) {
        // The mapped file itself, checked (dso_files.hpp), and still the one that ran.
        struct stat src{};
        UniqueFd in = open_dso(e.dso, src);
        if (!in) return errno;
        if (read_build_id(in.get()) != e.id) return ESTALE;
        // Another filesystem: a copy, within the limits, decided before anything is made.
        const uint64_t size = uint64_t(src.st_size);
        const bool same_fs = src.st_dev == root_dev_;
        Room room;
        if (!same_fs && !(room = fits(size))) return ++st_.over_limit, EFBIG;
        Dir entry;
        if (const int err = make_entry(rel, entry)) return err;
        if (same_fs) {
            // A hard link made from the fd (perf links too): no room taken, the source's own mode.
            const int err = entry.link_fd(in.get(), file);
            if (err == 0) linked = true;
            if (err != EXDEV && err != EPERM) return err;  // EXDEV: another mount of the filesystem
            if (!(room = fits(size))) return ++st_.over_limit, EFBIG;
        }
        // Never more readable than the source; never executable or writable by others.
        return copy(entry, file, in.get(), size, {}, src.st_mode & 0644, room);
    }

    const Dir& root_;
    const BuildIdCacheLimits& limits_;
    BuildIdCacheStats& st_;
    const std::atomic<bool>& abandoned_;
    dev_t root_dev_ = 0;
    std::optional<VdsoImage> vdso_;
};

}  // namespace

BuildIdCacheStats add_to_build_id_cache(const Dir& cache, const std::vector<BuildIdEntry>& entries,
                                        const BuildIdCacheLimits& limits, std::chrono::milliseconds time) {
    const auto t0 = std::chrono::steady_clock::now();
    // The worker owns its inputs (it may outlive this call) and hands its counters over entry by entry.
    struct Shared {
        std::mutex mu;
        Dir cache;
        std::vector<BuildIdEntry> entries;
        BuildIdCacheLimits limits;
        BuildIdCacheStats st;
        size_t done = 0;
    };
    if (!cache) return {};
    auto shared = std::make_shared<Shared>();
    shared->cache = cache.dup();
    shared->entries = entries;
    shared->limits = limits;
    if (!shared->limits.copied) shared->limits.copied = std::make_shared<std::atomic<uint64_t>>(0);
    const bool finished = run_bounded(
        [shared](const std::atomic<bool>& abandoned) {
            BuildIdCacheStats st;
            CacheFiller filler(shared->cache, shared->limits, st, abandoned);
            for (size_t i = 0; i < shared->entries.size() && !abandoned.load(); ++i) {
                filler.add(shared->entries[i]);
                std::lock_guard lock(shared->mu);
                shared->st = st;
                shared->done = i + 1;
            }
        },
        time);
    std::lock_guard lock(shared->mu);
    BuildIdCacheStats st = shared->st;
    if (!finished) {
        st.timed_out = true;
        st.failed += shared->entries.size() - shared->done;
        if (st.error.empty()) st.error = "not done in " + std::to_string(time.count() / 1000) + " s";
    }
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return st;
}

}  // namespace ringcap
