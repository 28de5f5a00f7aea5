// perf's build-id cache (~/.debug): a copy of every binary a profile's BUILD_ID names, keyed by its
// build-id, so perf report still symbolizes the profile after the binaries were rebuilt or removed.
//   <dir>/<path>/<build-id>/elf            the binary (a hard link when the filesystem allows)
//   <dir>/[kernel.kallsyms]/<id>/kallsyms  /proc/kallsyms;  <dir>/[vdso]/<id>/vdso  the vDSO image
//   <dir>/.build-id/<2 hex>/<38 hex>       -> ../../<path>/<build-id>
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ringcap/dir.hpp"
#include "ringcap/perf_data.hpp"

namespace ringcap {

// What the cache may grow by. Hard links cost nothing and are not counted; copies (another
// filesystem, /proc/kallsyms, the vDSO) are, by the source's size (a sparse file is copied whole).
struct BuildIdCacheLimits {
    uint64_t max_file = 512ull << 20;   // a file bigger than this is not copied
    uint64_t max_total = 2ull << 30;    // copies per record, all rotated files together
    double keep_free = 0.05;            // nor when the cache's filesystem would be fuller than 95 %
    // What copies of this record take so far, against max_total: shared by all its passes, since a
    // pass given up on (its time bound) may still be finishing a chunk. A copy's size is taken
    // before it starts and what it did not keep given back. Null: this pass's own.
    std::shared_ptr<std::atomic<uint64_t>> copied;
};

struct BuildIdCacheStats {
    size_t added = 0;       // entries new to the cache
    size_t present = 0;     // already there (from an earlier record)
    size_t linked = 0;      // of the added: hard links instead of copies
    uint64_t bytes_copied = 0;  // by the copies this pass completed
    size_t over_limit = 0;  // not copied: over a BuildIdCacheLimits bound (in `failed` too)
    bool timed_out = false; // given up on (the rest is in `failed`)
    double seconds = 0;
    std::string error;      // the first failure ("" if none); the others are counted in `failed`
    size_t failed = 0;
};

// perf's default cache directory: $HOME/.debug ("" without HOME).
std::string default_build_id_cache_dir();

// The cache directory `path`, for the effective user: it must be a directory (not a symlink) that
// the user owns and that group and others cannot write. It is created (0755) only in a directory of
// the user's own that others cannot write: ringcap as root makes nothing in a user's HOME. Invalid,
// with `why` set, otherwise.
Dir open_build_id_cache(const std::string& path, std::string* why);

// The vDSO of this process, which every 64-bit process shares: its bytes and build-id.
struct VdsoImage {
    std::span<const std::byte> bytes;
    std::vector<uint8_t> id;
};
std::optional<VdsoImage> current_vdso();

// Adds `entries` ("[kernel.kallsyms]" and "[vdso]" included) to `cache`, within `limits` and `time`:
// every name beneath the cache's fd without a symlink followed, every file opened as dso_files.hpp
// says and linked or copied from that fd, entries never more readable than their source
// (/proc/kallsyms: 0600). Never throws: a profile is complete without its cache entries. Once
// given up on, the pass stops at its copy's next chunk (4 MiB) and discards that copy.
BuildIdCacheStats add_to_build_id_cache(const Dir& cache, const std::vector<BuildIdEntry>& entries,
                                        const BuildIdCacheLimits& limits = {},
                                        std::chrono::milliseconds time = std::chrono::seconds(10));

}  // namespace ringcap
