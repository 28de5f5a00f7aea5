#include "ringcap/window_dump.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <unistd.h>
#include <vector>
#include <zstd.h>

#include "ringcap/records.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

int copy_range(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t len) {
    if (::lseek(out, off_t(out_off), SEEK_SET) < 0) return errno;
    off_t from = off_t(in_off);
    while (len > 0) {
        const ssize_t n = ::sendfile(out, in, &from, std::min<uint64_t>(len, 1u << 30));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return EIO;  // the window's memory ended early: cannot happen while it is kept
        len -= uint64_t(n);
    }
    return 0;
}

namespace {

// Calls fn(header, record) for each whole record at the start of [p, p + n); returns the bytes they
// take. A size below a header's is garbage: `ok` false, and all of it taken.
template <typename Fn>
size_t for_each_record(const std::byte* p, size_t n, bool& ok, Fn fn) {
    size_t pos = 0;
    while (n - pos >= sizeof(perf_event_header)) {
        perf_event_header h;
        std::memcpy(&h, p + pos, sizeof h);
        if (h.size < sizeof h) {
            ok = false;
            return n;
        }
        if (h.size > n - pos) break;
        fn(h, p + pos);
        pos += h.size;
    }
    return pos;
}

size_t count_whole(const std::byte* p, size_t n, RecordCount& c) {
    return for_each_record(p, n, c.ok, [&c](const perf_event_header& h, const std::byte*) {
        ++c.records;
        if (h.type == PERF_RECORD_SAMPLE) ++c.samples;
    });
}

// The records of a data section read so far: COMPRESSED ones decompressed into `plain` (one stream
// across records, as perf reads them) and their records counted.
struct Walker {
    RecordCount c;
    ZSTD_DStream* zs = ZSTD_createDStream();
    std::vector<std::byte> plain = std::vector<std::byte>(4u << 20);
    size_t plain_len = 0;
    Walker() { ZSTD_initDStream(zs); }
    ~Walker() { ZSTD_freeDStream(zs); }

    size_t walk(const std::byte* p, size_t n) {
        return for_each_record(p, n, c.ok, [this](const perf_event_header& h, const std::byte* rec) {
            if (h.type == kRecordCompressed) inflate(rec + sizeof h, h.size - sizeof h);
            else count_whole(rec, h.size, c);
        });
    }

    void inflate(const std::byte* z, size_t n) {
        ZSTD_inBuffer in{z, n, 0};
        while (in.pos < in.size) {
            if (plain.size() - plain_len < (1u << 20)) plain.resize(plain.size() + (2u << 20));
            ZSTD_outBuffer out{plain.data() + plain_len, plain.size() - plain_len, 0};
            if (ZSTD_isError(ZSTD_decompressStream(zs, &out, &in))) {
                c.ok = false;
                return;
            }
            plain_len += out.pos;
        }
        const size_t used = count_whole(plain.data(), plain_len, c);
        std::memmove(plain.data(), plain.data() + used, plain_len - used);
        plain_len -= used;
    }
};

}  // namespace

RecordCount count_records(int fd, uint64_t offset, uint64_t len) {
    Walker w;
    std::vector<std::byte> buf;
    uint64_t at = offset;
    const uint64_t end = offset + len;
    while (at < end) {
        const size_t had = buf.size(), want = size_t(std::min<uint64_t>(end - at, 8u << 20));
        buf.resize(had + want);
        const ssize_t n = ::pread(fd, buf.data() + had, want, off_t(at));
        if (n < 0 && errno == EINTR) {
            buf.resize(had);
            continue;
        }
        if (n <= 0) {
            buf.resize(had);
            break;
        }
        buf.resize(had + size_t(n));
        at += uint64_t(n);
        const size_t used = w.walk(buf.data(), buf.size());
        buf.erase(buf.begin(), buf.begin() + long(used));
    }
    // Bytes left over: a record that runs past the end, or one the stream never completed.
    if (!buf.empty() || w.plain_len) w.c.ok = false;
    return w.c;
}

void DumpCounter::start(int fd, uint64_t offset, uint64_t len, std::shared_ptr<std::atomic<int64_t>> out, bool background) {
    join();
    const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    thread_ = std::thread([own, offset, len, out, background] {
        if (background) ::setpriority(PRIO_PROCESS, 0, 19);  // this thread only (Linux): never in the capture's way
        const RecordCount c = count_records(own, offset, len);
        out->store(c.ok ? int64_t(c.samples) : -2);
        ::close(own);
    });
}

void DumpCounter::join() {
    if (thread_.joinable()) thread_.join();
}

}  // namespace ringcap
