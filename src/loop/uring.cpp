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
    io_uring_sqe* s = io_uring_get_sqe(&ring_);
    if (!s) {
        io_uring_submit(&ring_);
        s = io_uring_get_sqe(&ring_);
    }
    if (!s) throw Error("io_uring: no free SQE after submit", 1);
    return s;
}

int Uring::submit_and_wait(unsigned wait) {
    return io_uring_submit_and_wait(&ring_, wait);
}

}  // namespace ringcap
