#include "ringcap/output_file.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fcntl.h>
#include <sys/sysmacros.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ringcap {

namespace {

// Holds flock(LOCK_EX) on the output's directory while the names in it are checked and changed, so
// that two ringcaps starting or publishing at once see each other. Any user who can read the
// directory can take that lock too (/tmp), so it is waited for at most a second: then the names are
// changed without it (two ringcaps racing for one path is what it guards against, not safety).
class DirLock {
public:
    explicit DirLock(const Dir& dir) : fd_(::fcntl(dir.fd(), F_DUPFD_CLOEXEC, 0)) {
        for (int tries = 0; fd_ && tries < 100; ++tries) {
            if (::flock(fd_.get(), LOCK_EX | LOCK_NB) == 0) return;
            if (errno != EWOULDBLOCK && errno != EINTR) break;
            const timespec ten_ms{0, 10'000'000};
            ::nanosleep(&ten_ms, nullptr);
        }
        fd_.reset();  // not held
    }
    // Released explicitly: the duplicate shares the directory fd's open file description, which
    // the output keeps open for the whole record, and a flock belongs to the description. Closing
    // the duplicate alone kept the directory locked until the record ended, so every later start or
    // rotation in it waited the full second and went on without the lock.
    ~DirLock() {
        if (fd_) ::flock(fd_.get(), LOCK_UN);
    }
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;

private:
    UniqueFd fd_;  // a duplicate of the directory's fd
};

// Who holds the flock on the file `st` describes, as /proc/locks names it (the pid that took it): a
// running process's pid; 0 when none runs (its holder exited, and whatever still has the file open
// keeps the lock; or it runs in another PID namespace, which /proc/locks shows as 0); -1 when
// /proc/locks cannot be read.
pid_t lock_holder(const struct stat& st) {
    const auto locks = read_text_file("/proc/locks");
    if (!locks) return -1;
    char want[64];
    std::snprintf(want, sizeof want, " %02x:%02x:%llu ", major(st.st_dev), minor(st.st_dev),
                  static_cast<unsigned long long>(st.st_ino));
    for (size_t at = locks->find(want); at != std::string::npos; at = locks->find(want, at + 1)) {
        const size_t line = locks->rfind('\n', at) == std::string::npos ? 0 : locks->rfind('\n', at) + 1;
        const std::string text = locks->substr(line, at - line);
        if (text.find("FLOCK") == std::string::npos) continue;
        const long pid = std::strtol(text.c_str() + text.find_last_of(' ') + 1, nullptr, 10);
        if (pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM)) return pid_t(pid);
    }
    return 0;
}

// Whether another ringcap of this user is writing a file (holds its lock), and who.
struct Busy {
    bool locked = false;
    pid_t holder = 0;  // lock_holder(): > 0 a running process, else none could be seen after the wait
    explicit operator bool() const { return locked; }
};

constexpr int kDeadHolderWaitMs = 1000;  // how long a lock no running process holds is waited for

// Whether another ringcap of this user is writing the file `name` (holds its lock). Opened without
// following a symlink or ever opening a device or FIFO (Dir::open_regular). A file another user owns
// is not theirs to keep: anyone can create and lock a file at a name in /tmp. A lock no running
// process holds is waited for (at most kDeadHolderWaitMs): a killed ringcap's goes once its
// writes in flight have ended and its files are closed.
Busy locked_by_another(const Dir& dir, const std::string& name) {
    struct stat st{};
    UniqueFd fd = dir.open_regular(name, O_RDONLY, &st);
    if (!fd || st.st_uid != ::geteuid()) return {};
    for (int waited_ms = 0;; waited_ms += 10) {
        if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
            ::flock(fd.get(), LOCK_UN);
            return {};
        }
        if (errno != EWOULDBLOCK) return {};
        const pid_t holder = lock_holder(st);
        if (holder > 0 || waited_ms >= kDeadHolderWaitMs) return {true, holder};
        const timespec ten_ms{0, 10'000'000};
        ::nanosleep(&ten_ms, nullptr);
    }
}

// A ringcap that is starting on NAME says so with an empty, flocked marker .NAME.ringcap-starting-*
// (random), removed once it has published (then the file's own lock says it): a second one is
// refused at once, not after its whole setup. As for the file, only this user's count.
std::string starting_prefix(const std::string& name) { return "." + name + ".ringcap-starting-"; }

Busy another_starting(const Dir& dir, const std::string& name) {
    const std::string prefix = starting_prefix(name);
    for (const auto& e : dir.names()) {
        if (e.rfind(prefix, 0) != 0) continue;
        if (const Busy b = locked_by_another(dir, e)) return b;
        // Left by one that was killed: removed, if it is this user's.
        struct stat st{};
        if (dir.stat_at(e, st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) dir.unlink(e);
    }
    return {};
}

[[noreturn]] void busy(const std::string& path, const std::string& what, const Busy& b) {
    if (b.holder > 0)
        throw Error("another ringcap is writing '" + what + "' (pid " + std::to_string(b.holder) +
                        "): choose another -o than '" + path + "'",
                    2);
    throw Error("'" + what + "' is still locked after " + std::to_string(kDeadHolderWaitMs / 1000) +
                    " s, and no running process ringcap can see holds it (" +
                    (b.holder < 0 ? "/proc/locks cannot be read" : "its holder exited, or runs in another PID namespace") +
                    "): a killed ringcap's lock goes once its last writes have ended, normally within a second; "
                    "if no ringcap is writing it, run again, else choose another -o than '" + path + "'",
                2);
}

std::string last_component(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

const char* kind_noun(mode_t m) {
    return S_ISREG(m) ? "file" : S_ISLNK(m) ? "symlink" : S_ISDIR(m) ? "directory" : S_ISCHR(m) ? "character device"
           : S_ISBLK(m) ? "block device" : S_ISFIFO(m) ? "FIFO" : S_ISSOCK(m) ? "socket" : "special file";
}

std::string kind_of(mode_t m) { return std::string("a ") + kind_noun(m); }

// "uid 65534's FIFO", or "ringcap's own FIFO" for this user's.
std::string whose(const struct stat& st) {
    return (st.st_uid == ::geteuid() ? std::string("ringcap's own ") : "uid " + std::to_string(st.st_uid) + "'s ") +
           kind_noun(st.st_mode);
}

// Whether `st` (at the output's name) is another user's, made where that user can write (the
// directory is theirs, or writable by its group or by all, as /tmp): anyone may take a predictable
// name there first, so it is not theirs to keep. A directory or special file of ringcap's own user,
// or of a user who could not have made it (/dev/tty1, given to whoever logs in there), is not: as
// root, -o /dev/null must never move the system's /dev/null.
bool planted_by_another(const Dir& dir, const struct stat& st) {
    struct stat ds{};
    if (st.st_uid == ::geteuid() || dir.stat(ds) != 0) return false;
    return ds.st_uid == st.st_uid || (ds.st_mode & (S_IWGRP | S_IWOTH));
}

// Why the entry `st` at the output's name must stay as it is, or "" when it may be moved aside (a file
// or symlink, as perf moves any, or what another user planted).
std::string kept_reason(const Dir& dir, const std::string& out, const struct stat& st) {
    if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode) || planted_by_another(dir, st)) return "";
    if (S_ISDIR(st.st_mode)) return "output '" + out + "' is a directory: give a file name with -o";
    return "output '" + out + "' is " + kind_of(st.st_mode) +
           ": ringcap writes perf.data to a regular file and does not replace it; give a file name with -o";
}

}  // namespace

std::string write_error_hint(int err) {
    switch (err) {
        case ENOSPC: return " (the filesystem is full)";
        case EDQUOT: return " (the disk quota is used up)";
        case EFBIG: return " (the file reached RLIMIT_FSIZE, see ulimit -f, or the filesystem's largest file)";
        case EIO: return " (the device reported an I/O error: see dmesg)";
        case ECANCELED: return " (io_uring kept cancelling the write: no io-wq worker could be started, see ulimit -u "
                               "and free memory, or the ring was being torn down)";
        default: return "";
    }
}

void OutputFile::check_path(const std::string& out) {
    std::string name;
    const Dir dir = Dir::open_parent(out, &name);
    if (!dir) {
        const int err = errno;
        throw Error("output directory '" + dir.path() + "' " +
                    (err == ENOENT || err == ENOTDIR ? std::string("does not exist") : "cannot be opened: " + errno_text(err)) +
                    " (-o " + out + ")");
    }
    if (name.empty() || name == "." || name == "..")
        throw Error("output '" + out + "' is a directory: give a file name with -o");
    if (::faccessat(dir.fd(), ".", W_OK, AT_EACCESS) != 0)
        throw Error("output directory '" + dir.path() + "' is not writable: " + errno_text(errno) + " (choose another -o)");
    struct stat st{};
    if (dir.stat_at(name, st) != 0) return;
    // What is there is moved aside at publish(), never written through (a symlink is moved, not
    // followed); a device, FIFO, socket or directory only if another user planted it.
    if (const std::string why = kept_reason(dir, out, st); !why.empty()) throw Error(why);
}

OutputFile OutputFile::create(const std::string& path, bool allow_direct, bool own_path) {
    OutputFile f;
    f.path_ = path;
    f.dir_ = Dir::open_parent(path, &f.name_);
    if (!f.dir_) {
        const int err = errno;
        throw Error("cannot create output file '" + path + "': its directory: " + errno_text(err) +
                        (err == ENOENT ? " (does its directory exist?)" : ""),
                    2);
    }
    {
        DirLock lock(f.dir_);
        if (!own_path) {
            if (const Busy b = locked_by_another(f.dir_, f.name_)) busy(path, path, b);
            if (const Busy b = another_starting(f.dir_, f.name_)) busy(path, path, b);
            const std::string marker = starting_prefix(f.name_) + random_suffix();
            f.marker_fd_.reset(::openat(f.dir_.fd(), marker.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
            if (f.marker_fd_ && ::flock(f.marker_fd_.get(), LOCK_EX | LOCK_NB) == 0) f.marker_ = marker;
        }
        // 0600 as perf: a profile holds command lines, paths and addresses. Nameless until
        // publish(): an existing file is only replaced (and kept as .old) once the new one is set
        // up, a failed start never touches it, and there is no temporary name to plant a link at.
        f.file_ = f.dir_.create(f.name_, 0600);
        if (!f.file_) {
            const int err = errno;
            throw Error("cannot create output file '" + path + "': " + errno_text(err) +
                            (err == EACCES || err == EROFS ? " (choose a writable location with -o)" : ""),
                        2);
        }
        // Held until the process exits: the open file description keeps it across renames. On a
        // description of its own, which io_uring never holds: after SIGKILL the kernel tears the
        // ring down (and lets go of its files) asynchronously, and a lock on a description the ring
        // holds outlived the process, often by more than the second a new ringcap waits.
        // Without /proc it goes on the file's own fd (nobody else can lock a file with no name yet).
        f.lock_ = reopen(f.file_.fd(), O_RDONLY);
        ::flock(f.lock_ ? f.lock_.get() : f.file_.fd(), LOCK_EX | LOCK_NB);
    }
    if (allow_direct) {
        // The same file again (through /proc/self/fd, not its name). Some filesystems (tmpfs on
        // older kernels, overlayfs, FUSE) refuse O_DIRECT with EINVAL.
        f.direct_ = reopen(f.file_.fd(), O_WRONLY | O_DIRECT);
    }
    return f;
}

OutputFile OutputFile::in_memory(const std::string& path) {
    OutputFile f;
    f.path_ = path;
    f.published_ = true;  // nothing to publish
    f.file_ = NewFile::adopt(UniqueFd(::memfd_create("ringcap-pipe", MFD_CLOEXEC)));
    if (!f.file_) throw Error("memfd_create: " + errno_text(errno), 2);
    return f;
}

void OutputFile::publish() {
    if (published_) return;
    // What is in the file so far (header, the records of what already ran) survives a crash too.
    if (::fdatasync(file_.fd()) != 0)
        throw Error("cannot write '" + path_ + "' to disk: " + errno_text(errno), 2);
    // Clean now: drop the pages of what was written through the page cache (the head), so that an
    // O_DIRECT rewrite of them has nothing to invalidate (under nowait, that would send it to a worker).
    ::posix_fadvise(file_.fd(), 0, 0, POSIX_FADV_DONTNEED);
    DirLock lock(dir_);
    const std::string old = name_ + ".old";
    // Another ringcap may have published `path` since create(): replacing its file would lose its
    // capture (it keeps writing the file under .old, or unlinked).
    if (const Busy b = locked_by_another(dir_, name_)) busy(path_, path_, b);
    if (const Busy b = locked_by_another(dir_, old)) busy(path_, path_ + ".old", b);
    // Whatever is at the name (a file, or a symlink: moved, not followed) is moved aside; the new
    // file's name is made from its fd. Someone creating the name in between gets it moved too.
    for (int attempt = 0;; ++attempt) {
        struct stat st{};
        if (dir_.stat_at(name_, st) == 0) {
            if (const std::string why = kept_reason(dir_, path_, st); !why.empty()) throw Error(why);
            move_aside(st);
        }
        const bool named = !file_.temp_name().empty();
        const int err = dir_.link(file_, name_);
        if (err == 0) {
            drop_marker();  // the file's own lock says it from now on
            break;
        }
        if (err == ENOENT && named)  // a filesystem without O_TMPFILE, and a directory others can write
            throw Error("cannot create '" + path_ + "': another user removed or replaced its temporary file in '" +
                        dir_.path() + "', which others can write; choose a directory of your own with -o");
        if (err != EEXIST || attempt == 3) throw Error("cannot create '" + path_ + "': " + errno_text(err));
    }
    published_ = true;
}

void OutputFile::move_aside(const struct stat& st) {
    const std::string old = name_ + ".old";
    int err = dir_.rename(name_, old);
    if (err == 0) {
        if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
            notes_.push_back("moved " + whose(st) + " at '" + path_ + "' to '" + dir_.path_of(old) +
                             "' (another user's, where they can write: not honoured as the output)");
        return;
    }
    // .old cannot take it (a directory there, or a non-empty one for a directory): a name of its own
    // beside it, unpredictable and never replacing anything, so that nothing anyone made is lost.
    if (err == EISDIR || err == ENOTDIR || err == ENOTEMPTY || err == EEXIST) {
        struct stat os{};
        const bool old_known = dir_.stat_at(old, os) == 0;
        const std::string aside = old + "." + random_suffix();
        err = dir_.rename(name_, aside, RENAME_NOREPLACE);
        if (err == EINVAL) err = dir_.rename(name_, aside);  // a filesystem without RENAME_NOREPLACE
        if (err == 0) {
            // Appended piece by piece: GCC 12 -O2 with _FORTIFY_SOURCE warns, wrongly, -Wrestrict on
            // "'" + std::string&& here (an error in the packager's Release build).
            std::string note = "'";
            note += dir_.path_of(old);
            note += "' (";
            note += old_known ? whose(os) : std::string("?");
            note += ") cannot take ";
            note += whose(st);
            note += " at '";
            note += path_;
            note += "': moved it to '";
            note += dir_.path_of(aside);
            note += "' instead";
            notes_.push_back(std::move(note));
            return;
        }
    }
    throw Error("cannot move " + whose(st) + " at '" + path_ + "' aside to '" + dir_.path_of(old) + "': " +
                    errno_text(err) +
                    (err == EPERM || err == EACCES
                         ? " (in a sticky directory such as /tmp only its owner or root may move it): choose another -o"
                         : ": choose another -o"),
                2);
}

bool OutputFile::rename_to(const std::string& path) {
    const std::string name = last_component(path);
    DirLock lock(dir_);
    // A new name made from the fd (never replacing anything), then the old one removed if it is
    // still this file: in a directory others can write, a name may have been swapped meanwhile.
    if (const int err = dir_.link_fd(file_.fd(), name)) {
        if (err == EEXIST) return false;
        throw Error("cannot rename '" + path_ + "' to '" + path + "': " + errno_text(err), 1);
    }
    struct stat st{};
    if (::fstat(file_.fd(), &st) == 0 && dir_.holds(name_, st)) dir_.unlink(name_);
    name_ = name;
    path_ = path;
    return true;
}

int OutputFile::remove_sibling(const std::string& path) const { return dir_.unlink(last_component(path)); }

void OutputFile::drop_marker() {
    struct stat st{};
    if (!marker_.empty() && ::fstat(marker_fd_.get(), &st) == 0 && dir_.holds(marker_, st)) dir_.unlink(marker_);
    marker_.clear();
    marker_fd_.reset();
}

bool OutputFile::inline_writes() const {
    struct statfs fs{};
    return o_direct() && ::fstatfs(file_.fd(), &fs) == 0 && fs.f_type != TMPFS_MAGIC;
}

int pwrite_full(int fd, const void* buf, size_t len, uint64_t offset) {
    const char* p = static_cast<const char*>(buf);
    while (len > 0) {
        const ssize_t n = ::pwrite(fd, p, len, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return ENOSPC;
        p += n;
        len -= size_t(n);
        offset += uint64_t(n);
    }
    return 0;
}

void OutputFile::pwrite_all(const void* buf, size_t len, uint64_t offset) const {
    if (const int err = pwrite_full(file_.fd(), buf, len, offset); err != 0)
        throw Error("writing '" + path_ + "' at offset " + std::to_string(offset) + ": " + errno_text(err) +
                        write_error_hint(err),
                    1);
}

size_t OutputFile::pread_some(void* buf, size_t len, uint64_t offset) const {
    size_t done = 0;
    while (done < len) {
        ssize_t n = ::pread(file_.fd(), static_cast<char*>(buf) + done, len - done, off_t(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += size_t(n);
    }
    return done;
}

}  // namespace ringcap
