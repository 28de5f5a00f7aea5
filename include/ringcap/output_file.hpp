// The output file: created under a temporary name, moved into place once setup succeeded, locked
// against a second ringcap writing the same path, and opened twice (O_DIRECT for aligned bulk
// writes when the filesystem accepts it, buffered for the unaligned pieces: the header, features,
// and partial buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "ringcap/sys.hpp"

namespace ringcap {

class OutputFile {
public:
    // Refuses early, before any file is touched, an output that cannot be created or must not be
    // replaced (a directory, device, FIFO or socket). Throws Error (exit status 2) saying why.
    static void check_path(const std::string& path);
    // Creates the file as `path.ringcap-tmp`. Until publish() an existing file at `path` is
    // untouched; an unpublished file is removed. Throws Error (exit status 2) naming the cause, and
    // when another ringcap is writing `path` (or its .old), or is about to.
    // `own_path`: the file at `path` is this process's (rotation's next file, while the current one
    // still holds its lock there).
    static OutputFile create(const std::string& path, bool allow_direct = true, bool own_path = false);
    // A file in memory (memfd_create) for pipe mode: no name on disk, no lock, nothing to publish,
    // buffered writes only. `path` is what messages call it ("-"). Throws Error (exit status 2).
    static OutputFile in_memory(const std::string& path);
    // Makes the file durable, moves an existing `path` to `path.old` (as perf does) and the new file
    // into place. Throws Error (exit status 2) if another ringcap published `path` meanwhile.
    void publish();
    // Rotation: gives the published file its final name (the lock moves with it). Throws Error.
    void rename_to(const std::string& path);

    // Moving hands over the duty to remove an unpublished file.
    OutputFile(OutputFile&& o) noexcept
        : direct_(std::move(o.direct_)), buffered_(std::move(o.buffered_)), path_(std::move(o.path_)),
          tmp_path_(std::exchange(o.tmp_path_, {})) {}
    OutputFile& operator=(OutputFile&&) = delete;
    ~OutputFile();

    int direct_fd() const { return direct_ ? direct_.get() : buffered_.get(); }
    int buffered_fd() const { return buffered_.get(); }
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
    UniqueFd direct_;
    UniqueFd buffered_;  // read-write, and holds the lock (flock) for the whole record
    std::string path_;
    std::string tmp_path_;  // non-empty until publish()

    OutputFile() = default;
};

// What to do about a write error (errno): " (the filesystem is full)", or "".
std::string write_error_hint(int err);

// Positional write of all of [buf, buf + len) to fd, through short writes and EINTR: 0, or the errno
// (ENOSPC when the kernel writes nothing).
int pwrite_full(int fd, const void* buf, size_t len, uint64_t offset);

}  // namespace ringcap
