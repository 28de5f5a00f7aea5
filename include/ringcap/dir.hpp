// The one way ringcap touches names. ringcap runs as root and writes into directories that other
// users may control (a job's working directory, /tmp, a user's HOME), so every file it creates or
// replaces is reached through a directory fd with *at() calls, no name is followed (O_NOFOLLOW,
// RESOLVE_NO_SYMLINKS), a new file has no name until it is complete (O_TMPFILE, or where the
// filesystem lacks it O_EXCL under an unpredictable name), and no file is opened by name twice: a
// second open goes through /proc/self/fd of the first (refused, EOPNOTSUPP, without /proc).
// Functions return an invalid UniqueFd / Dir, or an errno value, and leave errno set; none throws.
#pragma once

#include <string>
#include <string_view>
#include <sys/stat.h>
#include <vector>

#include "ringcap/sys.hpp"

namespace ringcap {

class Dir;

// A file being written that has no final name yet: nameless (O_TMPFILE), or under a random temporary
// name that is removed unless the file was given its final one.
class NewFile {
public:
    NewFile() = default;
    NewFile(NewFile&& o) noexcept
        : fd_(std::move(o.fd_)), dir_(std::move(o.dir_)), temp_(std::exchange(o.temp_, {})), dev_(o.dev_), ino_(o.ino_) {}
    NewFile& operator=(NewFile&& o) noexcept;
    ~NewFile() { discard(); }

    // A file that has no name to look after (a memfd).
    static NewFile adopt(UniqueFd fd) {
        NewFile f;
        f.fd_ = std::move(fd);
        return f;
    }

    int fd() const { return fd_.get(); }
    explicit operator bool() const { return static_cast<bool>(fd_); }
    const std::string& temp_name() const { return temp_; }  // "" when nameless

private:
    friend class Dir;
    void discard();  // removes the temporary name, if it still names this file
    UniqueFd fd_;
    UniqueFd dir_;      // a dup of the directory's fd, to remove the temporary name
    std::string temp_;  // the temporary name in dir_, "" once linked or when nameless
    dev_t dev_ = 0;     // the file's identity, to remove only its own temporary name
    ino_t ino_ = 0;
};

class Dir {
public:
    Dir() = default;
    // Opens the directory `path` (ringcap's own option or setting: its symlinks are followed).
    static Dir open(const std::string& path);
    // The directory that holds `path`'s last component ("." for a bare name), and that component.
    static Dir open_parent(const std::string& path, std::string* name);

    explicit operator bool() const { return static_cast<bool>(fd_); }
    int fd() const { return fd_.get(); }
    const std::string& path() const { return path_; }  // for messages
    Dir dup() const;  // the same directory, an fd of its own
    std::string path_of(std::string_view name) const;
    // st of the directory itself.
    int stat(struct stat& st) const;

    // The directory `name` (one component, never a symlink, never "." or ".."), created with `mode`
    // when `create` and missing.
    Dir sub(std::string_view name, bool create = false, mode_t mode = 0755) const;
    // A path of several components below this directory, each opened as sub() does, resolved with
    // openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) where the kernel has it.
    Dir beneath(std::string_view rel, bool create = false, mode_t mode = 0755) const;

    // A new file for writing (O_RDWR) with `mode`, not yet visible under any name. `stem` names the
    // temporary file where one is needed.
    NewFile create(std::string_view stem, mode_t mode) const;
    // Gives `f` the name `name`, which must not exist (EEXIST otherwise): 0 or errno. The name is
    // made from the fd, never by resolving the temporary name again.
    int link(NewFile& f, std::string_view name) const;
    // Gives `f` the name `name`, atomically replacing whatever is there (a symlink is replaced, not
    // followed): 0 or errno.
    int replace(NewFile& f, std::string_view name) const;
    // Gives the file open as `fd` one more name (a hard link made from the fd): 0 or errno.
    int link_fd(int fd, std::string_view name) const;

    // An existing regular file, opened with `flags` (O_RDONLY, O_RDWR...) without following a
    // symlink, without blocking on a FIFO and without ever opening a device: the name is opened
    // O_PATH first and re-opened (through /proc/self/fd) only once fstat shows a regular file. `st`
    // receives its fstat, also when it is not a regular file (errno EINVAL then; ELOOP for a symlink;
    // EOPNOTSUPP without /proc: nothing is then opened for reading).
    UniqueFd open_regular(std::string_view name, int flags, struct stat* st = nullptr) const;
    // lstat of `name`: 0 or errno.
    int stat_at(std::string_view name, struct stat& st) const;
    // Whether `name` is still the file `st` describes (same device and inode, not a symlink).
    bool holds(std::string_view name, const struct stat& st) const;
    std::vector<std::string> names() const;  // what the directory holds (not . and ..)
    // 0 or errno; within this directory. `flags` as renameat2's (RENAME_NOREPLACE).
    int rename(std::string_view from, std::string_view to, unsigned flags = 0) const;
    int unlink(std::string_view name) const;                        // 0 or errno

private:
    UniqueFd fd_;
    std::string path_;
};

// What `fd` refers to, opened again with `flags` through /proc/self/fd: no name is resolved again.
// Works for O_PATH and O_TMPFILE fds. Invalid (errno set) when /proc is not mounted.
UniqueFd reopen(int fd, int flags);

// Opens a path another process named (a mapped file), trusting nothing in it: resolved without
// symlinks (openat2 RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, else O_NOFOLLOW on the last
// component), O_PATH first, and re-opened O_RDONLY | O_NONBLOCK | O_NOCTTY only if it is a regular
// file. `st` receives its fstat. Errors: ELOOP (a symlink on the way), EINVAL (not a regular file),
// EOPNOTSUPP (no /proc/self/fd to re-open it through).
UniqueFd open_untrusted_file(const std::string& path, struct stat& st);
// The same for a magic link that names one file (/proc/PID/map_files/...): followed, it is the point.
UniqueFd open_magic_link_file(const std::string& path, struct stat& st);
// A FIFO that ringcap's own option names (--control fifo:PATH): the last component not followed,
// O_PATH first, and opened with `flags` (O_NONBLOCK added) only if fstat shows a FIFO, so that a
// regular file or a device at the name is never opened. Errors as Dir::open_regular's.
UniqueFd open_fifo(const std::string& path, int flags, struct stat& st);

// Tests: create() as where the filesystem has no O_TMPFILE (named temporaries).
void force_named_temporaries(bool on);

// An unpredictable suffix for temporary names (getrandom): 16 hex digits.
std::string random_suffix();

}  // namespace ringcap
