#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

#include "ringcap/writer.hpp"

namespace ringcap {

OutputFile OutputFile::create(const std::string& path, bool allow_direct) {
    OutputFile f;
    f.path_ = path;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int err = errno;
        throw Error("cannot create output file '" + path + "': " + errno_text(err) +
                        (err == ENOENT ? " (does its directory exist?)" : "") +
                        (err == EACCES || err == EROFS ? " (choose a writable location with -o)" : ""),
                    2);
    }
    f.buffered_.reset(fd);
    if (allow_direct) {
        // Some filesystems (tmpfs on older kernels, overlayfs, FUSE) refuse O_DIRECT with EINVAL.
        int dfd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
        if (dfd >= 0) f.direct_.reset(dfd);
    }
    return f;
}

void OutputFile::pwrite_all(const void* buf, size_t len, uint64_t offset) const {
    const char* p = static_cast<const char*>(buf);
    while (len > 0) {
        ssize_t n = ::pwrite(buffered_.get(), p, len, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int err = n < 0 ? errno : EIO;
            throw Error("writing '" + path_ + "' at offset " + std::to_string(offset) + ": " + errno_text(err), 1);
        }
        p += n;
        len -= size_t(n);
        offset += uint64_t(n);
    }
}

}  // namespace ringcap
