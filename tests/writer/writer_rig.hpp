// The writer tests' rig: a temp file, a loop, a pool and a Writer, and the pattern stream they fill
// and check it with (writer_test.cpp, writer_error_test.cpp, writer_fault_test.cpp,
// writer_space_test.cpp, output_file_test.cpp).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fcntl.h>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "ringcap/loop.hpp"
#include "ringcap/writer.hpp"
#include "tools.hpp"

namespace writer_rig {

using namespace ringcap;

constexpr uint64_t kDataOffset = 8192;  // non-zero, so offset arithmetic is exercised
constexpr size_t kBuf = 64 * 1024;

// Byte i of the data stream. Depends on all bits of i, so a buffer landing at the wrong offset (any
// multiple of 4096 away) or twice is caught.
inline uint8_t pattern(uint64_t i) { return uint8_t((i * 0x9E3779B97F4A7C15ull) >> 56); }

// A fresh directory under $TMPDIR (or /tmp) with `path` inside it; all of it is removed at the end.
// A directory rather than a file: publish() gives the new file its name, keeping an existing `path`
// as `path.old` (and where the filesystem has no O_TMPFILE it is created under a temporary name).
struct TempPath {
    std::string dir, path;
    TempPath() {
        const char* t = std::getenv("TMPDIR");
        std::string tmpl = std::string(t && *t ? t : "/tmp") + "/ringcap-writer-XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        REQUIRE(::mkdtemp(buf.data()) != nullptr);
        dir = buf.data();
        path = dir + "/out.data";
    }
    ~TempPath() {
        run_command("rm -rf '" + dir + "'");
    }
    TempPath(const TempPath&) = delete;
    TempPath& operator=(const TempPath&) = delete;
};

// A loop sized for `slots` writes and no rings (SQ 16, CQ 32 for 8 slots). A refused io_uring skips.
inline std::unique_ptr<Loop> make_test_loop(Backend backend, size_t slots) {
    LoopConfig cfg;
    cfg.backend = backend;
    cfg.rings = 0;
    cfg.writes_in_flight = unsigned(slots);
    if (backend == Backend::Epoll) return make_epoll_loop(cfg);
    try {
        return make_uring_loop(cfg);
    } catch (const Error& e) {
        skip_test(std::string("io_uring unavailable: ") + e.what());
    }
}

inline const char* backend_name(Backend b) { return b == Backend::Uring ? "io_uring" : "epoll"; }

inline uint64_t file_size(const std::string& path) {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return uint64_t(st.st_size);
}

// First offset in [from, data_offset + len) that is wrong (zero hole before data_offset, pattern
// after), or -1. One result instead of millions of assertions.
inline int64_t first_mismatch(const std::string& path, uint64_t data_offset, uint64_t len, uint64_t from = 0) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(fd);
    std::vector<uint8_t> buf(1 << 20);
    const uint64_t end = data_offset + len;
    for (uint64_t off = from; off < end;) {
        const size_t want = size_t(std::min<uint64_t>(buf.size(), end - off));
        ssize_t n = ::pread(fd.get(), buf.data(), want, off_t(off));
        if (n <= 0) return int64_t(off);  // file too short
        for (ssize_t k = 0; k < n; ++k) {
            const uint64_t o = off + uint64_t(k);
            const uint8_t expect = o < data_offset ? 0 : pattern(o - data_offset);
            if (buf[size_t(k)] != expect) return int64_t(o);
        }
        off += uint64_t(n);
    }
    return -1;
}

// Loop, file, pool and writer for one test, plus the position in the pattern stream.
struct Rig final : LoopHandler {
    TempPath tmp;
    std::unique_ptr<Loop> loop;
    OutputFile file;
    StagingPool pool;
    FileSpace space{kDataOffset, false};  // no preallocation: file sizes are exact
    Writer writer;
    uint64_t pos = 0;         // bytes of the pattern committed so far
    uint64_t other_events = 0;  // ring/source events seen by pump() (there should be none)

    Rig(Backend backend, size_t buf_size, size_t count, bool allow_direct = true)
        : loop(make_test_loop(backend, count)), file(OutputFile::create(tmp.path, allow_direct)),
          pool(buf_size, count), writer(*loop, file, pool, space) {
        file.publish();  // at tmp.path from now on, so the test can read it back there
    }

    // Commits up to n pattern bytes in pieces of at most `chunk`; stops early when the pool is full.
    uint64_t fill(uint64_t n, size_t chunk = SIZE_MAX) {
        uint64_t done = 0;
        while (done < n) {
            auto w = pool.writable();
            if (w.empty()) break;
            const size_t k = size_t(std::min<uint64_t>({w.size(), n - done, chunk}));
            for (size_t j = 0; j < k; ++j) w[j] = std::byte{pattern(pos + j)};
            pool.commit(k);
            pos += k;
            done += k;
        }
        return done;
    }

    // One pipeline step as the recorder does it: issue what is queued, wait for an event, hand write
    // completions to the writer.
    void pump() { loop->run_once(*this, true); }

    void on_write(uint32_t slot, int res) override { writer.on_completion(slot, res); }
    void on_ring(uint32_t, uint32_t, int) override { ++other_events; }
    void on_source(Source) override { ++other_events; }

    bool is_buffer_start(uint64_t off, size_t buf_size) const {
        return off >= kDataOffset && (off - kDataOffset) % buf_size == 0;
    }
};

}  // namespace writer_rig
