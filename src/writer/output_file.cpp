#include "ringcap/output_file.hpp"

#include <cerrno>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ringcap {

namespace {

std::string dir_of(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// Holds flock(LOCK_EX) on the output's directory while the names in it are checked and changed, so
// that two ringcaps starting or publishing at once see each other.
class DirLock {
public:
    explicit DirLock(const std::string& path) : fd_(::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
        if (fd_) while (::flock(fd_.get(), LOCK_EX) != 0 && errno == EINTR) {}
    }

private:
    UniqueFd fd_;  // closing it releases the lock
};

// Whether another process holds the lock of the file at `path` (a ringcap writing it).
bool locked_by_another(const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;  // never open devices
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
    if (!fd) return false;
    return ::flock(fd.get(), LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

[[noreturn]] void busy(const std::string& path, const std::string& what) {
    throw Error("another ringcap is writing '" + what + "': choose another -o than '" + path + "'", 2);
}

}  // namespace

std::string write_error_hint(int err) {
    switch (err) {
        case ENOSPC: return " (the filesystem is full)";
        case EDQUOT: return " (the disk quota is used up)";
        case EFBIG: return " (the file reached RLIMIT_FSIZE, see ulimit -f, or the filesystem's largest file)";
        case EIO: return " (the device reported an I/O error: see dmesg)";
        default: return "";
    }
}

void OutputFile::check_path(const std::string& out) {
    const auto slash = out.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
    struct stat st{};
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw Error("output directory '" + dir + "' does not exist (-o " + out + ")");
    if (access(dir.c_str(), W_OK) != 0)
        throw Error("output directory '" + dir + "' is not writable: " + errno_text(errno) + " (choose another -o)");
    if (stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw Error("output '" + out + "' is a directory: give a file name with -o");
    if (stat(out.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        // A device, FIFO or socket is never replaced by a regular file (as root, -o /dev/null would
        // replace the system's /dev/null).
        const char* kind = S_ISCHR(st.st_mode) ? "a character device" : S_ISBLK(st.st_mode) ? "a block device"
                           : S_ISFIFO(st.st_mode) ? "a FIFO" : "not a regular file";
        throw Error("output '" + out + "' is " + kind + ": ringcap writes perf.data to a regular file and does not "
                    "replace it; give a file name with -o");
    }
    if (stat(out.c_str(), &st) == 0 && access(out.c_str(), W_OK) != 0)
        throw Error("output '" + out + "' is not writable: " + errno_text(errno) + " (choose another -o)");
}

OutputFile OutputFile::create(const std::string& path, bool allow_direct, bool own_path) {
    OutputFile f;
    f.path_ = path;
    // Created under a temporary name: an existing file is only replaced (and kept as .old) once the
    // new one exists, so a failed start never touches it.
    const std::string tmp = path + ".ringcap-tmp";
    {
        DirLock dir(path);
        if (!own_path && locked_by_another(path)) busy(path, path);
        // A temporary file that is locked belongs to a ringcap that is starting; an unlocked one was
        // left by one that was killed before it published.
        if (locked_by_another(tmp)) busy(path, tmp);
        ::unlink(tmp.c_str());
        // 0600 as perf: a profile holds command lines, paths and addresses.
        int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            const int err = errno;
            throw Error("cannot create output file '" + path + "': " + errno_text(err) +
                            (err == ENOENT ? " (does its directory exist?)" : "") +
                            (err == EACCES || err == EROFS ? " (choose a writable location with -o)" : ""),
                        2);
        }
        f.buffered_.reset(fd);
        f.tmp_path_ = tmp;  // ours from here on: removed unless published
        // Held until the process exits: the open file description keeps it across the rename. Under
        // the directory lock nobody else can hold it yet.
        ::flock(fd, LOCK_EX | LOCK_NB);
    }
    if (allow_direct) {
        // Some filesystems (tmpfs on older kernels, overlayfs, FUSE) refuse O_DIRECT with EINVAL.
        int dfd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
        if (dfd >= 0) f.direct_.reset(dfd);
    }
    return f;
}

OutputFile OutputFile::in_memory(const std::string& path) {
    OutputFile f;
    f.path_ = path;
    f.buffered_.reset(::memfd_create("ringcap-pipe", MFD_CLOEXEC));
    if (!f.buffered_) throw Error("memfd_create: " + errno_text(errno), 2);
    return f;
}

void OutputFile::publish() {
    if (tmp_path_.empty()) return;
    // What is in the file so far (header, the records of what already ran) survives a crash too.
    if (::fdatasync(buffered_.get()) != 0)
        throw Error("cannot write '" + path_ + "' to disk: " + errno_text(errno), 2);
    // Clean now: drop the pages of what was written through the page cache (the head), so that an
    // O_DIRECT rewrite of them has nothing to invalidate (under nowait, that would send it to a worker).
    ::posix_fadvise(buffered_.get(), 0, 0, POSIX_FADV_DONTNEED);
    DirLock dir(path_);
    const std::string old = path_ + ".old";
    // Another ringcap may have published `path` since create(): replacing its file would lose its
    // capture (it keeps writing the file under .old, or unlinked).
    if (locked_by_another(path_)) busy(path_, path_);
    if (locked_by_another(old)) busy(path_, old);
    struct stat st{};
    if (::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        if (::rename(path_.c_str(), old.c_str()) != 0) {
            const int err = errno;
            throw Error("cannot rename '" + path_ + "' to '" + old + "': " + errno_text(err));
        }
    }
    if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
        const int err = errno;
        throw Error("cannot create '" + path_ + "': " + errno_text(err));
    }
    tmp_path_.clear();
}

void OutputFile::rename_to(const std::string& path) {
    DirLock dir(path_);
    if (::rename(path_.c_str(), path.c_str()) != 0) {
        const int err = errno;
        throw Error("cannot rename '" + path_ + "' to '" + path + "': " + errno_text(err), 1);
    }
    path_ = path;
}

bool OutputFile::inline_writes() const {
    struct statfs fs{};
    return o_direct() && ::fstatfs(buffered_.get(), &fs) == 0 && fs.f_type != TMPFS_MAGIC;
}

OutputFile::~OutputFile() {
    if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());  // never published: leave no trace
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
    if (const int err = pwrite_full(buffered_.get(), buf, len, offset); err != 0)
        throw Error("writing '" + path_ + "' at offset " + std::to_string(offset) + ": " + errno_text(err) +
                        write_error_hint(err),
                    1);
}

size_t OutputFile::pread_some(void* buf, size_t len, uint64_t offset) const {
    size_t done = 0;
    while (done < len) {
        ssize_t n = ::pread(buffered_.get(), static_cast<char*>(buf) + done, len - done, off_t(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += size_t(n);
    }
    return done;
}

}  // namespace ringcap
