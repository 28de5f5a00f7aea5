// The io_uring every stage shares: polls on ring owners, writes of staging buffers, and the stop
// sources (signalfd, child pidfd, duration timeout) all complete on one CQ.
#pragma once

#include <cstdint>
#include <liburing.h>
#include <string>

namespace ringcap {

// user_data = kind in the top byte, an index below.
enum class Tag : uint8_t { Poll = 1, Write = 2, Signal = 3, Child = 4, Timer = 5, Cancel = 6 };
inline constexpr uint64_t make_tag(Tag t, uint64_t index) { return (uint64_t(t) << 56) | index; }
inline constexpr Tag tag_kind(uint64_t user_data) { return Tag(user_data >> 56); }
inline constexpr uint32_t tag_index(uint64_t user_data) { return uint32_t(user_data & 0xffffffffu); }

class Uring {
public:
    struct Params {
        unsigned sq_entries = 64;
        unsigned cq_entries = 128;
        bool single_issuer = true;  // SINGLE_ISSUER|DEFER_TASKRUN when the kernel has them
    };
    // Throws Error explaining why io_uring is unavailable (sysctl, seccomp, memlock).
    explicit Uring(const Params& p);
    ~Uring();
    Uring(const Uring&) = delete;
    Uring& operator=(const Uring&) = delete;

    // A free SQE; submits queued ones first if the SQ is full.
    io_uring_sqe* sqe();
    // Submits queued SQEs and waits for at least `wait` completions. Returns -errno or submitted count.
    int submit_and_wait(unsigned wait);
    io_uring* raw() { return &ring_; }

    unsigned cq_entries() const { return ring_.cq.ring_entries; }
    unsigned sq_entries() const { return ring_.sq.ring_entries; }
    const std::string& setup_flags() const { return flags_text_; }

    uint64_t enters() const { return enters_; }
    uint64_t sqes_submitted() const { return sqes_; }

private:
    io_uring ring_{};
    std::string flags_text_;
    uint64_t enters_ = 0;
    uint64_t sqes_ = 0;
};

}  // namespace ringcap
