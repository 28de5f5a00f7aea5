// Opening the files that other processes mapped, and reading their build-ids, as root. A mapped
// file's path is whatever its process (any user) made it: it may be a symlink now, a FIFO that
// blocks an open forever, a device whose open has effects, or another file with the same name. So a
// file is opened once, O_PATH first and for real only when it is a regular file (dir.hpp), and it
// must be the mapped device and inode; while the process lives, /proc/PID/map_files gives the mapped
// file itself. Its build-id is read, and its cache copy made, from that fd. The whole pass runs on a
// thread of its own and is given up on after a bound (a hung NFS or FUSE server), saying what it
// skipped.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "ringcap/dsos.hpp"
#include "ringcap/perf_data.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

// The file `d` names, checked as above: an fd open O_RDONLY with `st` its fstat, or invalid with
// errno: ENOENT (gone), ESTALE (another file at that path now), ELOOP (a symlink on the way), EINVAL
// (not a regular file), EWOULDBLOCK (a lease held on it).
UniqueFd open_dso(const DsoRef& d, struct stat& st);
// What errno from open_dso() means, for messages: "changed on disk since it was mapped"...
std::string dso_skip_reason(int err);

// GNU build-id (NT_GNU_BUILD_ID in a PT_NOTE) of the ELF file open as `fd`.
std::optional<std::vector<uint8_t>> read_build_id(int fd);
// The same for a path, opened as an untrusted one (open_untrusted_file).
std::optional<std::vector<uint8_t>> read_build_id(const std::string& path);

struct BuildIdPass {
    std::vector<BuildIdEntry> entries;  // the kernel, the vDSO, then the files with a build-id
    size_t files = 0;                   // files asked about
    size_t skipped = 0;                 // not opened (gone, changed, refused) or not reached in time
    size_t refused = 0;                 // of which: not a regular file, or a symlink on the way
    std::string first_skip;             // "path: reason" of the first refused one, else of the first skipped
    bool timed_out = false;
    double seconds = 0;
};
// What HEADER_BUILD_ID lists: the kernel, the vDSO and those of `dsos` that have a build-id,
// read within `limit`.
BuildIdPass collect_build_ids(const std::vector<DsoRef>& dsos, std::chrono::milliseconds limit);
// Its size in HEADER_BUILD_ID without reading a file (a build-id is a fixed 20 bytes there): for
// --max-size, which must know the room the features will take.
std::vector<BuildIdEntry> build_id_placeholders(const std::vector<DsoRef>& dsos);

}  // namespace ringcap
