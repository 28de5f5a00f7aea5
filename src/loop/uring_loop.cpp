// io_uring backend: one multishot POLL_ADD per watched ring fd, writes as (fixed) SQEs, and the stop
// sources (signalfd, pidfd, a timeout) on the same CQ. Each run_once is one io_uring_enter.
#include <array>
#include <cerrno>
#include <poll.h>
#include <sstream>
#include <sys/uio.h>
#include <vector>

#include "ringcap/loop.hpp"
#include "ringcap/sys.hpp"
#include "ringcap/uring.hpp"

namespace ringcap {

namespace {

// user_data: kind in bits 56..63, a poll's generation in 48..55, `which` in 32..47, index in 0..31.
// The generation tells a watch apart from an earlier one of the same ring and fd number (a CPU's ring
// replaced after hotplug): a late CQE of a removed poll never passes for the current one.
enum class Kind : uint8_t { Poll = 1, Write = 2, Source = 3, Remove = 4 };
constexpr uint64_t encode(Kind k, uint32_t which, uint32_t index, uint8_t gen = 0) {
    return (uint64_t(k) << 56) | (uint64_t(gen) << 48) | (uint64_t(which & 0xffff) << 32) | index;
}

unsigned round_up_pow2(unsigned v) {
    unsigned p = 1;
    while (p < v) p <<= 1;
    return p;
}

class UringLoop final : public Loop {
public:
    explicit UringLoop(const LoopConfig& cfg) : ring_(params(cfg)) {
        // A CQ's worth, plus what sqe() may set aside while the handlers run: no allocation later.
        delivering_.reserve(2 * ring_.cq_entries());
        round_trip();
    }

    ~UringLoop() override {
        // Release the output file now: the kernel tears a ring down asynchronously, and a registered
        // file would keep its filesystem busy (umount: EBUSY) for a while after we exit.
        if (fixed_files_) io_uring_unregister_files(ring_.raw());
        if (fixed_buffers_) io_uring_unregister_buffers(ring_.raw());
    }

    const char* name() const override { return "io_uring"; }
    std::string describe() const override {
        std::ostringstream s;
        s << "io_uring (" << ring_.setup_flags() << ", SQ " << ring_.sq_entries() << ", CQ " << ring_.cq_entries()
          << ", multishot poll, " << (fixed_buffers_ ? "registered buffers" : "unregistered buffers") << ")";
        return s.str();
    }

    void watch_ring(uint32_t ring, uint32_t which, int fd, const RingBuffer& mapped) override {
        if (!mapped.valid()) throw Error("internal: poll armed for an fd without a mapped ring", 1);
        if (watches_.size() <= ring) watches_.resize(ring + 1);
        Watch& w = watches_[ring];
        w = {fd, which, true, uint8_t(w.gen + 1)};
        arm(ring);
    }

    void unwatch_ring(uint32_t ring, uint32_t which, int) override {
        Watch& w = watches_[ring];
        if (!w.active || w.which != which) return;
        w.active = false;
        // Cancel the multishot request; it completes with -ECANCELED, which is ignored as stale.
        io_uring_sqe* sqe = ring_.sqe();
        io_uring_prep_poll_remove(sqe, encode(Kind::Poll, which, ring, w.gen));
        io_uring_sqe_set_data64(sqe, encode(Kind::Remove, which, ring));
    }

    void watch_source(Source s, int fd) override {
        source_fds_[size_t(s)] = fd;
        arm_source(s);
    }

    void set_timer(double seconds) override {
        timer_.tv_sec = int64_t(seconds);
        timer_.tv_nsec = int64_t((seconds - double(timer_.tv_sec)) * 1e9);
        io_uring_sqe* sqe = ring_.sqe();
        // The kernel copies the timespec when the SQE is submitted; timer_ outlives that anyway.
        io_uring_prep_timeout(sqe, &timer_, 0, 0);
        io_uring_sqe_set_data64(sqe, encode(Kind::Source, 0, uint32_t(Source::Timer)));
    }

    void set_tick(double seconds) override {
        tick_.tv_sec = int64_t(seconds);
        tick_.tv_nsec = int64_t((seconds - double(tick_.tv_sec)) * 1e9);
        if (tick_armed_) return;  // the timeout re-armed after the tick in flight takes it
        tick_armed_ = true;
        arm_tick();
    }

    void restart_tick(double seconds) override {
        if (!tick_armed_) return;
        restart_.tv_sec = int64_t(seconds);
        restart_.tv_nsec = int64_t((seconds - double(restart_.tv_sec)) * 1e9);
        // Goes with the next enter (no syscall of its own). If the tick fired meanwhile, the update
        // finds nothing (-ENOENT, ignored) and the tick is re-armed at its period as usual.
        io_uring_sqe* sqe = ring_.sqe();
        io_uring_prep_timeout_update(sqe, &restart_, encode(Kind::Source, 0, uint32_t(Source::Tick)), 0);
        io_uring_sqe_set_data64(sqe, encode(Kind::Remove, 0, 0));
    }

    void attach_output(std::span<const int> files, std::span<const iovec> buffers) override {
        // Registered buffers spare the kernel pinning pages per write, registered files an fd lookup.
        // Both are optional (RLIMIT_MEMLOCK may forbid the buffers).
        fixed_buffers_ = !buffers.empty() &&
                         io_uring_register_buffers(ring_.raw(), buffers.data(), unsigned(buffers.size())) == 0;
        nfixed_ = fixed_buffers_ ? uint32_t(buffers.size()) : 0;  // other slots write unregistered
        files_.assign(files.begin(), files.end());
        if (files_.size() > 64) throw Error("internal: more than 64 output files for one loop", 1);
        fixed_files_ = io_uring_register_files(ring_.raw(), files_.data(), unsigned(files_.size())) == 0;
        fixed_mask_ = fixed_files_ ? ~uint64_t(0) : 0;
    }

    void update_output(unsigned first, std::span<const int> files) override {
        for (size_t i = 0; i < files.size(); ++i) files_.at(first + i) = files[i];
        if (!fixed_files_) return;
        const uint64_t slots = (files.size() >= 64 ? ~uint64_t(0) : (uint64_t(1) << files.size()) - 1) << first;
        // In-flight requests hold their own reference to a replaced registered file.
        if (io_uring_register_files_update(ring_.raw(), first, files_.data() + first, unsigned(files.size())) ==
            int(files.size())) {
            fixed_mask_ |= slots;
            return;
        }
        // Refused (maybe after updating some): these slots write through their plain descriptors.
        // The table stays: SQEs for the other slots may be prepared and not yet submitted (the
        // previous file's, at a rotation), and without it they would fail with EBADF.
        fixed_mask_ &= ~slots;
    }

    void write(uint32_t slot, unsigned file, const std::byte* p, uint32_t len, uint64_t offset) override {
        io_uring_sqe* sqe = ring_.sqe();
        const bool fixed = is_fixed(file);
        const int fd = fixed ? int(file) : files_.at(file);
        if (fixed_buffers_ && slot < nfixed_) io_uring_prep_write_fixed(sqe, fd, p, len, offset, int(slot));
        else io_uring_prep_write(sqe, fd, p, len, offset);
        if (fixed) sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data64(sqe, encode(Kind::Write, 0, slot));
        ++stats_.writes;
    }

    void fallocate(uint32_t slot, unsigned file, uint64_t offset, uint64_t len) override {
        // Runs in an io-wq worker (fallocate blocks); that is fine, it is not a data write.
        io_uring_sqe* sqe = ring_.sqe();
        const bool fixed = is_fixed(file);
        io_uring_prep_fallocate(sqe, fixed ? int(file) : files_.at(file), 0, off_t(offset), off_t(len));
        if (fixed) sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data64(sqe, encode(Kind::Write, 0, slot));
    }

    void run_once(LoopHandler& h, bool block) override {
        ++stats_.waits;
        // Completions that sqe() had to set aside are older than the CQ's: do not wait if any.
        int rc = ring_.submit_and_wait(block && !ring_.has_backlog() ? 1 : 0);
        if (rc < 0 && rc != -EINTR && rc != -ETIME && rc != -EAGAIN && rc != -EBUSY)
            throw Error("io_uring_enter: " + errno_text(-rc), 1);
        ring_.take_completions(delivering_);
        for (const auto& c : delivering_) dispatch(h, c.user_data, c.res, c.flags);
        stats_.sq_full = ring_.made_room();
    }

private:
    struct Watch {
        int fd = -1;
        uint32_t which = 0;
        bool active = false;
        uint8_t gen = 0;
    };

    bool is_fixed(unsigned file) const { return file < 64 && (fixed_mask_ >> file & 1); }

    static Uring::Params params(const LoopConfig& cfg) {
        Uring::Params p;
        const unsigned sources = kSourceCount;
        const unsigned need = cfg.rings + cfg.writes_in_flight + sources;
        // Each armed poll and each write can have a CQE outstanding; 2x headroom, because an
        // overflowing CQ ends multishot polls (they are re-armed, but that costs a round trip).
        p.cq_entries = cfg.cq_entries ? cfg.cq_entries : round_up_pow2(2 * need);
        p.sq_entries = std::min(round_up_pow2(need), p.cq_entries);  // the kernel needs SQ <= CQ
        return p;
    }

    // io_uring_setup can succeed where io_uring_enter is refused (a seccomp profile that blocks only
    // that): prove the whole path with a NOP now, so the choice of backend is made at setup.
    void round_trip() {
        io_uring_sqe* sqe = ring_.sqe();
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data64(sqe, encode(Kind::Remove, 0, 0));
        int rc;
        do rc = ring_.submit_and_wait(1);
        while (rc == -EINTR);
        if (rc < 0)
            throw Error("io_uring_enter failed: " + errno_text(-rc) +
                        (rc == -EPERM || rc == -ENOSYS ? "; a seccomp profile (container runtime) probably blocks it"
                                                       : ""));
        ring_.take_completions(delivering_);  // the NOP's completion
    }

    void dispatch(LoopHandler& h, uint64_t ud, int res, uint32_t flags) {
        const uint32_t index = uint32_t(ud & 0xffffffffu);
        const uint32_t which = uint32_t((ud >> 32) & 0xffff);
        switch (Kind(ud >> 56)) {
            case Kind::Poll:
                on_poll(h, index, which, uint8_t(ud >> 48), res, flags);
                break;
            case Kind::Write:
                h.on_write(index, res);
                break;
            case Kind::Source:
                h.on_source(Source(index));
                // A plain timeout fires once: the next one, at the period the handler may have set.
                if (Source(index) == Source::Tick) arm_tick();
                // A watched fd keeps reporting (the handler consumes it), as under epoll: its
                // multishot poll is armed again when it ended (CQ overflow).
                if (index < source_fds_.size() && source_fds_[index] >= 0 && !(flags & IORING_CQE_F_MORE))
                    arm_source(Source(index));
                break;
            case Kind::Remove:
                break;
        }
    }

    void arm_source(Source s) {
        io_uring_sqe* sqe = ring_.sqe();
        io_uring_prep_poll_multishot(sqe, source_fds_[size_t(s)], POLLIN);
        io_uring_sqe_set_data64(sqe, encode(Kind::Source, 0, uint32_t(s)));
    }

    void arm_tick() {
        io_uring_sqe* sqe = ring_.sqe();
        io_uring_prep_timeout(sqe, &tick_, 0, 0);
        io_uring_sqe_set_data64(sqe, encode(Kind::Source, 0, uint32_t(Source::Tick)));
    }

    void arm(uint32_t ring) {
        const Watch& w = watches_[ring];
        io_uring_sqe* sqe = ring_.sqe();
        io_uring_prep_poll_multishot(sqe, w.fd, POLLIN);
        io_uring_sqe_set_data64(sqe, encode(Kind::Poll, w.which, ring, w.gen));
    }

    void on_poll(LoopHandler& h, uint32_t ring, uint32_t which, uint8_t gen, int res, uint32_t flags) {
        if (ring >= watches_.size()) return;
        const Watch& w = watches_[ring];
        if (!w.active || w.which != which || w.gen != gen) return;  // a late CQE for a poll we removed
        ++stats_.ring_events;
        const bool transient = res == -ECANCELED || res == -EAGAIN || res == -ENOMEM || res == -EINTR;
        if (res >= 0 || !transient) h.on_ring(ring, which, res);
        // The handler may have retired the ring (POLLHUP): then it is not armed again.
        if (watches_[ring].active && watches_[ring].which == which && watches_[ring].gen == gen &&
            !(flags & IORING_CQE_F_MORE)) {
            // The multishot request ended (CQ overflow, transient error): arm it again.
            ++stats_.rearms;
            arm(ring);
        }
    }

    Uring ring_;
    std::vector<Watch> watches_;
    __kernel_timespec timer_{}, tick_{}, restart_{};
    bool tick_armed_ = false;
    std::array<int, kSourceCount> source_fds_{-1, -1, -1, -1, -1, -1};  // per Source, for the fds watched by poll
    bool fixed_buffers_ = false;
    uint32_t nfixed_ = 0;
    bool fixed_files_ = false;  // a file table is registered
    uint64_t fixed_mask_ = 0;   // the file indexes written through it (bit i: files_[i])
    std::vector<int> files_;
    std::vector<Uring::Completion> delivering_;
};

}  // namespace

std::unique_ptr<Loop> make_uring_loop(const LoopConfig& cfg) { return std::make_unique<UringLoop>(cfg); }

}  // namespace ringcap
