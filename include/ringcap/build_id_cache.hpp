// perf's build-id cache (~/.debug): a copy of every binary a profile's BUILD_ID names, keyed by its
// build-id, so perf report still symbolizes the profile after the binaries were rebuilt or removed.
//   <dir>/<path>/<build-id>/elf            the binary (a hard link when the filesystem allows)
//   <dir>/[kernel.kallsyms]/<id>/kallsyms  /proc/kallsyms;  <dir>/[vdso]/<id>/vdso  the vDSO image
//   <dir>/.build-id/<2 hex>/<38 hex>       -> ../../<path>/<build-id>
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ringcap/perf_data.hpp"

namespace ringcap {

struct BuildIdCacheStats {
    size_t added = 0;       // entries new to the cache
    size_t present = 0;     // already there (from an earlier record)
    size_t linked = 0;      // of the added: hard links instead of copies
    uint64_t bytes_copied = 0;
    double seconds = 0;
    std::string error;      // the first failure ("" if none); the others are counted in `failed`
    size_t failed = 0;
};

// perf's default cache directory: $HOME/.debug ("" without HOME).
std::string default_build_id_cache_dir();

// The vDSO of this process, which every 64-bit process shares: its bytes and build-id.
struct VdsoImage {
    std::span<const std::byte> bytes;
    std::vector<uint8_t> id;
};
std::optional<VdsoImage> current_vdso();

// Adds `entries` ("[kernel.kallsyms]" and "[vdso]" included) to the cache at `dir`. Never throws:
// a profile is complete without its cache entries.
BuildIdCacheStats add_to_build_id_cache(const std::string& dir, const std::vector<BuildIdEntry>& entries);

}  // namespace ringcap
