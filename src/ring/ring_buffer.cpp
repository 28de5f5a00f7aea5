#include <sys/mman.h>

#include "ringcap/ring.hpp"

namespace ringcap {

std::optional<RingBuffer> RingBuffer::map(int fd, size_t data_pages) {
    const size_t len = (1 + data_pages) * page_size();
    // PROT_WRITE makes the ring non-overwritable: the kernel never overwrites unread data and
    // reports what it could not store as PERF_RECORD_LOST.
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return std::nullopt;
    return RingBuffer(Mapping(p, len));
}

std::optional<RingBuffer> RingBuffer::anonymous(size_t data_pages) {
    const size_t len = (1 + data_pages) * page_size();
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return std::nullopt;
    auto* page = static_cast<perf_event_mmap_page*>(p);
    page->data_offset = page_size();
    page->data_size = data_pages * page_size();
    return RingBuffer(Mapping(p, len));
}

RingView RingBuffer::view() const {
    auto* page = static_cast<perf_event_mmap_page*>(mapping_.get());
    // Kernels since 4.1 fill data_offset/data_size; older ones put the data right after page 0.
    uint64_t off = page->data_offset ? page->data_offset : page_size();
    uint64_t size = page->data_size ? page->data_size : mapping_.size() - page_size();
    return {page, static_cast<std::byte*>(mapping_.get()) + off, size};
}

}  // namespace ringcap
