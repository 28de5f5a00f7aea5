// Move-only owner of an io_uring instance, set up with the best flags the kernel accepts.
#pragma once

#include <cstdint>
#include <liburing.h>
#include <string>
#include <vector>

namespace ringcap {

class Uring {
public:
    struct Params {
        unsigned sq_entries = 64;
        unsigned cq_entries = 128;
        bool single_issuer = true;  // SINGLE_ISSUER|DEFER_TASKRUN when the kernel has them
    };
    // A completion copied out of the CQ (see sqe()).
    struct Completion {
        uint64_t user_data;
        int32_t res;
        uint32_t flags;
    };

    // Throws Error explaining why io_uring is unavailable (sysctl, seccomp, memlock).
    explicit Uring(const Params& p);
    ~Uring();
    Uring(const Uring&) = delete;
    Uring& operator=(const Uring&) = delete;

    // A free SQE, never null. When the SQ is full it submits what is queued; if the kernel takes
    // nothing more (its CQ is full), it moves completions out of the CQ into the backlog, and waits
    // for one if there are none, until an SQE is free. Throws Error if io_uring_submit fails for
    // any other reason. `made_room` counts the times the SQ was full.
    io_uring_sqe* sqe();
    // Submits queued SQEs and waits for at least `wait` completions. Returns -errno or submitted count.
    int submit_and_wait(unsigned wait);
    // Whether sqe() set completions aside since the last take_completions().
    bool has_backlog() const { return !backlog_.empty(); }
    // Every completion ready, oldest first (the backlog, then the CQ), copied into `out`, and the CQ
    // advanced once. Handlers then run on the copy, so sqe() may reap the CQ meanwhile.
    void take_completions(std::vector<Completion>& out) {
        out.clear();
        out.swap(backlog_);
        reap_into(out);
    }
    io_uring* raw() { return &ring_; }

    unsigned cq_entries() const { return ring_.cq.ring_entries; }
    unsigned sq_entries() const { return ring_.sq.ring_entries; }
    const std::string& setup_flags() const { return flags_text_; }
    uint64_t made_room() const { return made_room_; }

private:
    unsigned reap_into(std::vector<Completion>& out);  // moves every ready CQE to `out`

    io_uring ring_{};
    std::string flags_text_;
    std::vector<Completion> backlog_;
    uint64_t made_room_ = 0;
};

}  // namespace ringcap
