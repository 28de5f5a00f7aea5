// ringcap_synthbench's limits of this machine (synth_limits.hpp).
#include "synth_limits.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <linux/magic.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <vector>

namespace synthbench {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

void* map_anon(size_t n) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        std::perror("mmap");
        std::exit(1);
    }
    std::memset(p, 0x5a, n);  // fault every page in before timing
    return p;
}

// The reader's copy: record-sized pieces of a large source into 1 MiB aligned buffers. Best of 3.
double memcpy_gbps() {
    constexpr size_t kSrc = 256u << 20, kDst = 64u << 20, kPiece = 8192;
    auto* src = static_cast<std::byte*>(map_anon(kSrc));
    auto* dst = static_cast<std::byte*>(map_anon(kDst));
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = Clock::now();
        size_t d = 0;
        for (size_t s = 0; s < kSrc; s += kPiece) {
            std::memcpy(dst + d, src + s, kPiece);
            d = (d + kPiece) % kDst;
        }
        best = std::max(best, double(kSrc) / seconds_since(t0) / 1e9);
    }
    munmap(src, kSrc);
    munmap(dst, kDst);
    return best;
}

// Sequential 1 MiB writes to a new file in dir for `seconds` with `depth` in flight (io_uring),
// O_DIRECT if the filesystem takes it (as the collector's output), else buffered. GB/s, or <0.
double write_gbps(const std::string& dir, unsigned depth, double seconds, bool* direct, std::string* why) {
    constexpr size_t kBlock = 1u << 20;
    const std::string path = dir + "/ringcap-synthbench-write.tmp";
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        *why = "open " + path + ": " + std::strerror(errno);
        return -1;
    }
    unlink(path.c_str());
    // As ringcap writes: into space allocated ahead (where the filesystem runs such writes inline;
    // not tmpfs). 4 GiB of unwritten extents cost only metadata.
    struct statfs fs{};
    if (*direct && fstatfs(fd, &fs) == 0 && fs.f_type != TMPFS_MAGIC) fallocate(fd, 0, 0, off_t(4) << 30);
    auto* buf = static_cast<std::byte*>(map_anon(kBlock * depth));
    io_uring ring;
    if (int r = io_uring_queue_init(depth * 2, &ring, 0); r < 0) {
        *why = std::string("io_uring_queue_init: ") + std::strerror(-r);
        close(fd);
        return -1;
    }
    // Registered buffers, as the collector's writer uses: no page pinning per write.
    std::vector<iovec> iov(depth);
    for (unsigned s = 0; s < depth; ++s) iov[s] = {buf + s * kBlock, kBlock};
    const bool fixed = io_uring_register_buffers(&ring, iov.data(), depth) == 0;
    uint64_t offset = 0, done = 0;
    unsigned inflight = 0;
    auto submit = [&](unsigned slot) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        if (fixed) io_uring_prep_write_fixed(sqe, fd, buf + slot * kBlock, kBlock, offset, int(slot));
        else io_uring_prep_write(sqe, fd, buf + slot * kBlock, kBlock, offset);
        io_uring_sqe_set_data64(sqe, slot);
        offset += kBlock;
        ++inflight;
    };
    const auto t0 = Clock::now();
    // The SQ has 2 x depth entries, so a submit never finds it full; a failed submit is an error.
    auto submit_all = [&]() {
        const int rc = io_uring_submit(&ring);
        if (rc < 0) *why = std::string("io_uring_submit: ") + std::strerror(-rc);
        return rc >= 0;
    };
    for (unsigned s = 0; s < depth; ++s) submit(s);
    bool stopping = !submit_all();
    if (stopping) inflight = 0;
    while (inflight > 0) {
        io_uring_cqe* cqe;
        if (io_uring_wait_cqe(&ring, &cqe) < 0) break;
        const int res = cqe->res;
        const unsigned slot = unsigned(io_uring_cqe_get_data64(cqe));
        io_uring_cqe_seen(&ring, cqe);
        --inflight;
        if (res != int(kBlock)) {
            *why = std::string("write: ") + (res < 0 ? std::strerror(-res) : "short write");
            stopping = true;
            continue;
        }
        done += kBlock;
        if (!stopping && seconds_since(t0) < seconds) {
            submit(slot);
            if (!submit_all()) {
                stopping = true;
                --inflight;  // that write was never submitted
            }
        }
    }
    const double secs = seconds_since(t0);
    io_uring_queue_exit(&ring);
    munmap(buf, kBlock * depth);
    close(fd);
    return why->empty() ? double(done) / secs / 1e9 : -1;
}

}  // namespace synthbench
