#include "ringcap/uring.hpp"

#include <cerrno>

#include "ringcap/sys.hpp"

namespace ringcap {

static std::string why_no_uring(int err) {
    std::string msg = "io_uring_setup failed: " + errno_text(err);
    if (err == EPERM || err == EACCES) {
        auto disabled = read_sysctl("kernel/io_uring_disabled");
        if (disabled && *disabled != 0)
            msg += "; sysctl kernel.io_uring_disabled=" + std::to_string(*disabled) +
                   " (set it to 0, or to 1 and add this user to kernel.io_uring_group)";
        else
            msg += "; a seccomp profile (container runtime) probably blocks io_uring";
    } else if (err == ENOSYS) {
        msg += "; this kernel has no io_uring or a seccomp profile hides it";
    } else if (err == ENOMEM) {
        msg += "; RLIMIT_MEMLOCK is too small for the rings (raise it with ulimit -l)";
    }
    return msg;
}

Uring::Uring(const Params& p) {
    backlog_.reserve(p.cq_entries);
    io_uring_params params{};
    params.flags = IORING_SETUP_CQSIZE;
    params.cq_entries = p.cq_entries;
    int rc = -EINVAL;
    if (p.single_issuer) {
        // One thread submits and reaps; DEFER_TASKRUN runs completion work only when we enter the
        // kernel to wait, instead of interrupting us with task_work.
        io_uring_params q = params;
        q.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
        rc = io_uring_queue_init_params(p.sq_entries, &ring_, &q);
        if (rc == 0) flags_text_ = "CQSIZE|SINGLE_ISSUER|DEFER_TASKRUN";
    }
    if (rc == -EINVAL || (rc < 0 && !p.single_issuer)) {
        io_uring_params q = params;
        q.flags |= IORING_SETUP_COOP_TASKRUN;
        rc = io_uring_queue_init_params(p.sq_entries, &ring_, &q);
        if (rc == 0) flags_text_ = "CQSIZE|COOP_TASKRUN";
    }
    if (rc == -EINVAL) {
        io_uring_params q = params;
        rc = io_uring_queue_init_params(p.sq_entries, &ring_, &q);
        if (rc == 0) flags_text_ = "CQSIZE";
    }
    if (rc < 0) throw Error(why_no_uring(-rc));
}

Uring::~Uring() { io_uring_queue_exit(&ring_); }

io_uring_sqe* Uring::sqe() {
    if (io_uring_sqe* s = io_uring_get_sqe(&ring_)) return s;
    ++made_room_;
    for (;;) {
        const int rc = io_uring_submit(&ring_);
        if (rc < 0 && rc != -EBUSY && rc != -EAGAIN && rc != -EINTR)
            throw Error("io_uring_submit: " + errno_text(-rc), 1);
        if (io_uring_sqe* s = io_uring_get_sqe(&ring_)) return s;
        // The kernel took no SQE: its CQ (and overflow list) is full. Reap without delivering: the
        // caller may be inside a completion handler, so the completions wait in the backlog.
        if (reap_into(backlog_) == 0) {
            // Nothing to reap yet: wait for a completion, briefly, then try the submit again.
            io_uring_cqe* cqe = nullptr;
            __kernel_timespec ts{0, 10'000'000};
            const int w = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
            if (w < 0 && w != -EINTR && w != -EAGAIN && w != -ETIME)
                throw Error("io_uring_wait_cqe: " + errno_text(-w), 1);
            reap_into(backlog_);
        }
    }
}

unsigned Uring::reap_into(std::vector<Completion>& out) {
    io_uring_cqe* cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
        out.push_back({cqe->user_data, cqe->res, cqe->flags});
        ++n;
    }
    io_uring_cq_advance(&ring_, n);
    return n;
}

int Uring::submit_and_wait(unsigned wait) {
    return io_uring_submit_and_wait(&ring_, wait);
}

}  // namespace ringcap
