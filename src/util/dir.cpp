#include "ringcap/dir.hpp"

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ringcap {

namespace {

// openat2(2) (Linux 5.6); ENOSYS before, and where a seccomp filter refuses it.
int sys_openat2(int dirfd, const char* path, uint64_t flags, uint64_t resolve) {
    open_how how{};
    how.flags = flags;
    how.resolve = resolve;
    return int(::syscall(SYS_openat2, dirfd, path, &how, sizeof how));
}

// Whether openat2 works here: probed once.
bool have_openat2() {
    static const bool yes = [] {
        const int fd = sys_openat2(AT_FDCWD, "/", O_PATH | O_CLOEXEC, RESOLVE_NO_SYMLINKS);
        if (fd < 0) return false;
        ::close(fd);
        return true;
    }();
    return yes;
}

bool valid_component(std::string_view name) {
    return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
           name.find('\0') == std::string_view::npos;
}

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// A name for a temporary file that another user cannot guess ahead of us.
std::string temp_name(std::string_view stem) {
    return std::string(stem) + ".ringcap-tmp-" + random_suffix();
}

// After O_PATH: refuses what must never be opened for real (ELOOP for a symlink, EINVAL for anything
// but `type`: a FIFO, device or socket where a regular file is wanted) and re-opens the file through
// /proc/self/fd, the very file whose type was checked. Without /proc it is refused (EOPNOTSUPP):
// opening the name again would open whatever was renamed there meanwhile (a device: the open itself
// can have effects) before its identity could be compared.
UniqueFd open_checked(UniqueFd path_fd, mode_t type, int flags, struct stat& st) {
    if (!path_fd) return {};
    if (::fstat(path_fd.get(), &st) != 0) return {};
    if (S_ISLNK(st.st_mode)) {
        errno = ELOOP;
        return {};
    }
    if ((st.st_mode & S_IFMT) != type) {
        errno = EINVAL;
        return {};
    }
    flags |= O_CLOEXEC | O_NOCTTY | O_NONBLOCK;  // O_NONBLOCK: a file lease fails the open instead of holding it
    UniqueFd fd = reopen(path_fd.get(), flags);
    if (!fd && errno == ENOENT) errno = EOPNOTSUPP;  // no /proc/self/fd
    return fd;
}

bool g_named_temporaries = false;  // tests: the path taken where the filesystem has no O_TMPFILE

}  // namespace

std::string random_suffix() {
    unsigned char b[8];
    for (size_t got = 0; got < sizeof b;) {
        const ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {  // no entropy source: never predictable from the name alone, though weaker
            const uint64_t v = uint64_t(::getpid()) * 0x9e3779b97f4a7c15ull ^ uint64_t(reinterpret_cast<uintptr_t>(&b));
            for (size_t i = 0; i < sizeof b; ++i) b[i] = uint8_t(v >> (8 * i));
            break;
        }
        got += size_t(n);
    }
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (unsigned char c : b) {
        s += digits[c >> 4];
        s += digits[c & 15];
    }
    return s;
}

UniqueFd reopen(int fd, int flags) {
    return UniqueFd(::open(fd_path(fd).c_str(), flags | O_CLOEXEC));
}

// ---- NewFile ----

NewFile& NewFile::operator=(NewFile&& o) noexcept {
    if (this != &o) {
        discard();
        fd_ = std::move(o.fd_);
        dir_ = std::move(o.dir_);
        temp_ = std::exchange(o.temp_, {});
        dev_ = o.dev_;
        ino_ = o.ino_;
    }
    return *this;
}

void NewFile::discard() {
    struct stat st{};
    if (!temp_.empty() && dir_ && ::fstatat(dir_.get(), temp_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        st.st_dev == dev_ && st.st_ino == ino_)
        ::unlinkat(dir_.get(), temp_.c_str(), 0);
    temp_.clear();
}

// ---- Dir ----

Dir Dir::open(const std::string& path) {
    Dir d;
    d.fd_.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    d.path_ = path;
    return d;
}

Dir Dir::open_parent(const std::string& path, std::string* name) {
    const auto slash = path.rfind('/');
    *name = slash == std::string::npos ? path : path.substr(slash + 1);
    return open(slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash));
}

Dir Dir::dup() const {
    Dir d;
    if (fd_) d.fd_.reset(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
    d.path_ = path_;
    return d;
}

std::string Dir::path_of(std::string_view name) const {
    if (path_ == ".") return std::string(name);
    return path_ + (path_.empty() || path_.back() == '/' ? "" : "/") + std::string(name);
}

int Dir::stat(struct stat& st) const { return ::fstat(fd_.get(), &st) == 0 ? 0 : errno; }

Dir Dir::sub(std::string_view name, bool create, mode_t mode) const {
    Dir d;
    d.path_ = path_of(name);
    if (!valid_component(name)) {
        errno = EINVAL;
        return d;
    }
    const std::string n(name);
    if (create && ::mkdirat(fd_.get(), n.c_str(), mode) != 0 && errno != EEXIST) return d;
    // O_NOFOLLOW: a symlink in its place fails (ELOOP or ENOTDIR) instead of leading elsewhere.
    d.fd_.reset(::openat(fd_.get(), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    return d;
}

Dir Dir::beneath(std::string_view rel, bool create, mode_t mode) const {
    if (!create && have_openat2() && !rel.empty() && rel.front() != '/') {
        Dir d;
        d.path_ = path_of(rel);
        d.fd_.reset(sys_openat2(fd_.get(), std::string(rel).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                                RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS));
        if (d.fd_ || errno != ENOSYS) return d;
    }
    // Component by component (also what creating needs): each one a real directory.
    Dir at = dup();
    size_t pos = 0;
    while (pos <= rel.size() && at) {
        const size_t slash = rel.find('/', pos);
        const std::string_view part = rel.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos);
        if (!part.empty()) at = at.sub(part, create, mode);
        if (slash == std::string_view::npos) break;
        pos = slash + 1;
    }
    return at;
}

void force_named_temporaries(bool on) { g_named_temporaries = on; }

NewFile Dir::create(std::string_view stem, mode_t mode) const {
    NewFile f;
    if (!g_named_temporaries) {
        f.fd_.reset(::openat(fd_.get(), ".", O_TMPFILE | O_RDWR | O_CLOEXEC, mode));
        // EOPNOTSUPP: the filesystem has no O_TMPFILE (EISDIR: the kernel predates it).
        if (f.fd_ || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return f;
    }
    for (int attempt = 0; attempt < 16; ++attempt) {
        const std::string name = temp_name(stem);
        f.fd_.reset(::openat(fd_.get(), name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
        if (f.fd_) {
            struct stat st{};
            ::fstat(f.fd(), &st);
            f.temp_ = name;
            f.dev_ = st.st_dev;
            f.ino_ = st.st_ino;
            f.dir_.reset(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
            return f;
        }
        if (errno != EEXIST) return f;
    }
    return f;
}

int Dir::link_fd(int fd, std::string_view name) const {
    if (!valid_component(name)) return EINVAL;
    const std::string n(name);
    // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH (root has it); /proc/self/fd works for anyone.
    if (::linkat(fd, "", fd_.get(), n.c_str(), AT_EMPTY_PATH) == 0) return 0;
    if (errno != ENOENT && errno != EPERM) return errno;
    if (::linkat(AT_FDCWD, fd_path(fd).c_str(), fd_.get(), n.c_str(), AT_SYMLINK_FOLLOW) == 0) return 0;
    return errno;
}

int Dir::link(NewFile& f, std::string_view name) const {
    if (const int err = link_fd(f.fd(), name)) return err;
    if (!f.temp_.empty()) {
        // Its temporary name goes, if it still names this file (in a directory other users can write,
        // they may have renamed it; then what they put there stays).
        struct stat st{};
        if (::fstat(f.fd(), &st) == 0 && holds(f.temp_, st)) ::unlinkat(fd_.get(), f.temp_.c_str(), 0);
        f.temp_.clear();
    }
    return 0;
}

int Dir::replace(NewFile& f, std::string_view name) const {
    if (!valid_component(name)) return EINVAL;
    struct stat st{};
    if (::fstat(f.fd(), &st) != 0) return errno;
    // A second name of its own first (link() never replaces), then renamed over `name`: rename(2)
    // replaces a symlink there instead of following it.
    std::string staged = f.temp_;
    if (staged.empty()) {
        staged = temp_name(name);
        if (const int err = link_fd(f.fd(), staged)) return err;
    }
    if (!holds(staged, st) || ::renameat(fd_.get(), staged.c_str(), fd_.get(), std::string(name).c_str()) != 0) {
        const int err = holds(staged, st) ? errno : EAGAIN;  // EAGAIN: another user renamed it meanwhile
        if (holds(staged, st)) ::unlinkat(fd_.get(), staged.c_str(), 0);
        return err;
    }
    f.temp_.clear();
    return 0;
}

UniqueFd Dir::open_regular(std::string_view name, int flags, struct stat* st) const {
    struct stat local{};
    struct stat& s = st ? *st : local;
    if (!valid_component(name)) {
        errno = EINVAL;
        return {};
    }
    return open_checked(UniqueFd(::openat(fd_.get(), std::string(name).c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC)),
                        S_IFREG, flags, s);
}

int Dir::stat_at(std::string_view name, struct stat& st) const {
    return ::fstatat(fd_.get(), std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
}

bool Dir::holds(std::string_view name, const struct stat& st) const {
    struct stat now{};
    return stat_at(name, now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino;
}

std::vector<std::string> Dir::names() const {
    std::vector<std::string> out;
    DIR* d = ::fdopendir(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));  // its own fd: closedir closes it
    if (!d) return out;
    while (const dirent* e = ::readdir(d)) {
        const std::string_view n = e->d_name;
        if (n != "." && n != "..") out.emplace_back(n);
    }
    ::closedir(d);
    return out;
}

int Dir::rename(std::string_view from, std::string_view to, unsigned flags) const {
    if (!valid_component(from) || !valid_component(to)) return EINVAL;
    return ::renameat2(fd_.get(), std::string(from).c_str(), fd_.get(), std::string(to).c_str(), flags) == 0 ? 0 : errno;
}

int Dir::unlink(std::string_view name) const {
    if (!valid_component(name)) return EINVAL;
    return ::unlinkat(fd_.get(), std::string(name).c_str(), 0) == 0 ? 0 : errno;
}

UniqueFd open_untrusted_file(const std::string& path, struct stat& st) {
    UniqueFd p;
    if (have_openat2()) {
        p.reset(sys_openat2(AT_FDCWD, path.c_str(), O_PATH | O_CLOEXEC, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS));
    } else {
        p.reset(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    }
    return open_checked(std::move(p), S_IFREG, O_RDONLY, st);
}

UniqueFd open_magic_link_file(const std::string& path, struct stat& st) {
    return open_checked(UniqueFd(::open(path.c_str(), O_PATH | O_CLOEXEC)), S_IFREG, O_RDONLY, st);
}

UniqueFd open_fifo(const std::string& path, int flags, struct stat& st) {
    return open_checked(UniqueFd(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC)), S_IFIFO, flags, st);
}

}  // namespace ringcap
