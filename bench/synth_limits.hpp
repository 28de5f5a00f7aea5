// ringcap_synthbench's limits of this machine, measured in the same run as the collector: memcpy
// bandwidth as the reader copies, and what the output filesystem writes as the collector writes.
#pragma once

#include <cstddef>
#include <string>

namespace synthbench {

// Anonymous memory, every page faulted in (exits on failure: a bench without memory has nothing to say).
void* map_anon(size_t n);
// The reader's copy: record-sized pieces of a large source into 1 MiB aligned buffers. GB/s, best of 3.
double memcpy_gbps();
// Sequential 1 MiB writes to a new file in dir for `seconds` with `depth` in flight (io_uring),
// O_DIRECT if the filesystem takes it (as the collector's output), else buffered. GB/s, or <0 with
// *why set.
double write_gbps(const std::string& dir, unsigned depth, double seconds, bool* direct, std::string* why);

}  // namespace synthbench
