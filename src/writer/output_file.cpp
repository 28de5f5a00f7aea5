#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ringcap/writer.hpp"

namespace ringcap {

OutputFile OutputFile::create(const std::string& path, bool allow_direct) {
    OutputFile f;
    f.path_ = path;
    // Created under a temporary name: an existing file is only replaced (and kept as .old) once the
    // new one exists, so a failed start never touches it.
    f.tmp_path_ = path + ".ringcap-tmp";
    ::unlink(f.tmp_path_.c_str());
    int fd = ::open(f.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
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
        int dfd = ::open(f.tmp_path_.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
        if (dfd >= 0) f.direct_.reset(dfd);
    }
    return f;
}

void OutputFile::publish() {
    if (tmp_path_.empty()) return;
    struct stat st{};
    if (::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        const std::string old = path_ + ".old";
        if (::rename(path_.c_str(), old.c_str()) != 0) {
            int err = errno;
            ::unlink(tmp_path_.c_str());
            throw Error("cannot rename '" + path_ + "' to '" + old + "': " + errno_text(err));
        }
    }
    if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp_path_.c_str());
        throw Error("cannot create '" + path_ + "': " + errno_text(err));
    }
    tmp_path_.clear();
}

OutputFile::~OutputFile() {
    if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());  // never published: leave no trace
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
