#include "ringcap/window_output.hpp"

#include <fcntl.h>
#include <linux/falloc.h>

namespace ringcap {

WindowOutput::WindowOutput(std::vector<AttrEntry> attrs) : file_(OutputFile::in_memory("window")), attrs_(std::move(attrs)) {}

int WindowOutput::write_block(uint64_t offset, const void* p, size_t len) {
    return pwrite_full(file_.buffered_fd(), p, len, offset);
}

void WindowOutput::add_ids(size_t event_index, const std::vector<uint64_t>& ids) {
    auto& list = attrs_.at(event_index).ids;
    list.insert(list.end(), ids.begin(), ids.end());
}

void WindowOutput::drop_below(uint64_t offset) {
    if (offset <= start_) return;
    // The file keeps its size: offsets stay where the Writers put them. tmpfs frees whole pages;
    // start_ is a buffer boundary (4 KiB aligned).
    ::fallocate(file_.buffered_fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(start_), off_t(offset - start_));
    start_ = offset;
}

}  // namespace ringcap
