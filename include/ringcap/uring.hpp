// Move-only owner of an io_uring instance, set up with the best flags the kernel accepts.
#pragma once

#include <cstdint>
#include <liburing.h>
#include <string>

namespace ringcap {

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

private:
    io_uring ring_{};
    std::string flags_text_;
};

}  // namespace ringcap
