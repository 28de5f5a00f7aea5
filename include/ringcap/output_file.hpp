// The output file: created without a name (dir.hpp: O_TMPFILE, or a random temporary name), given
// its name once setup succeeded, locked against a second ringcap writing the same path, and open
// twice (O_DIRECT for aligned bulk writes when the filesystem accepts it, buffered for the unaligned
// pieces: the header, features, and partial buffers); the second fd is the first one re-opened, never
// the name. Every name is reached through the directory's fd, which is opened once: a directory that
// other users can write is safe to record into.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ringcap/dir.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

class OutputFile {
public:
    // Refuses early, before any file is touched, an output that cannot be created or must not be
    // replaced (a directory, device, FIFO or socket). Throws Error (exit status 2) saying why.
    static void check_path(const std::string& path);
    // Creates the file, nameless until publish(): an existing file at `path` is untouched until
    // then, and an unpublished file leaves no trace. Throws Error (exit status 2) naming the cause,
    // and when another ringcap of this user is writing `path`.
    // `own_path`: the file at `path` is this process's (rotation's next file, while the current one
    // still holds its lock there).
    static OutputFile create(const std::string& path, bool allow_direct = true, bool own_path = false);
    // A file in memory (memfd_create) for pipe mode: no name on disk, no lock, nothing to publish,
    // buffered writes only. `path` is what messages call it ("-"). Throws Error (exit status 2).
    static OutputFile in_memory(const std::string& path);
    // Makes the file durable, moves an existing `path` to `path.old` (as perf does) and gives the new
    // file its name. Throws Error (exit status 2) if another ringcap published `path` meanwhile, or
    // what is there must stay (check_path). A directory, FIFO or device another user planted at
    // `path` is moved aside too, and where `path.old` cannot take it (a directory there), to
    // `path.old.RANDOM`: take_notes() says so.
    void publish();
    // What publish() did that the user should hear of (one line each, without "ringcap: ").
    std::vector<std::string> take_notes() { return std::exchange(notes_, {}); }
    // Rotation: gives the published file the name `path` (in the same directory) instead of its own;
    // the lock goes with the file. False if `path` exists (choose another); throws Error otherwise.
    bool rename_to(const std::string& path);
    // Removes `path` (a file this record finished, in the same directory): 0 or errno.
    int remove_sibling(const std::string& path) const;

    OutputFile(OutputFile&& o) noexcept
        : dir_(std::move(o.dir_)), name_(std::move(o.name_)), direct_(std::move(o.direct_)), file_(std::move(o.file_)),
          lock_(std::move(o.lock_)), published_(o.published_), path_(std::move(o.path_)),
          marker_(std::exchange(o.marker_, {})), marker_fd_(std::move(o.marker_fd_)), notes_(std::move(o.notes_)) {}
    OutputFile& operator=(OutputFile&&) = delete;
    ~OutputFile() { drop_marker(); }

    int direct_fd() const { return direct_ ? direct_.get() : file_.fd(); }
    int buffered_fd() const { return file_.fd(); }
    bool o_direct() const { return static_cast<bool>(direct_); }
    // Whether writes can run inline when the file is allocated ahead of them (FileSpace): O_DIRECT,
    // on a filesystem that takes nowait writes (not tmpfs, where every write goes to a worker).
    bool inline_writes() const;
    const std::string& path() const { return path_; }
    // Synchronous positional write of all of buf (used at start and stop only).
    void pwrite_all(const void* buf, size_t len, uint64_t offset) const;
    // Synchronous positional read; fewer bytes at the end of the file.
    size_t pread_some(void* buf, size_t len, uint64_t offset) const;

private:
    Dir dir_;             // the output's directory, opened once
    std::string name_;    // the file's name in it
    UniqueFd direct_;
    NewFile file_;        // read-write
    // The file re-opened read-only: holds the lock (flock) for the whole record. A description of
    // its own, never given to io_uring (direct_fd() and buffered_fd() are), so the lock goes with
    // the process and not with the ring's asynchronous teardown.
    UniqueFd lock_;
    bool published_ = false;
    std::string path_;
    std::string marker_;  // ".NAME.ringcap-starting-*" until published (another_starting in output_file.cpp)
    UniqueFd marker_fd_;  // holds its lock
    std::vector<std::string> notes_;

    void drop_marker();
    void move_aside(const struct stat& st);  // what is at the name (`st`), before the new file takes it

    OutputFile() = default;
};

// What to do about a write error (errno): " (the filesystem is full)", or "".
std::string write_error_hint(int err);

// Positional write of all of [buf, buf + len) to fd, through short writes and EINTR: 0, or the errno
// (ENOSPC when the kernel writes nothing).
int pwrite_full(int fd, const void* buf, size_t len, uint64_t offset);

}  // namespace ringcap
