// Seed 000 as tests: what the kernel does when a perf fd without a ring is polled, and what the
// loop does with a hung-up fd (retire it; never see it again).
#include <catch2/catch.hpp>

#include <algorithm>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "ringcap/loop.hpp"
#include "ringcap/ring.hpp"
#include "support.hpp"

using namespace ringcap;

namespace {

// A sampling cpu-clock event for `pid` that would wake a reader every sample, if it had a ring.
UniqueFd open_sampling_event(pid_t pid, bool disabled) {
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.sample_period = 100000;  // 100 us
    a.sample_type = PERF_SAMPLE_IP;
    a.wakeup_events = 1;
    a.disabled = disabled;
    int fd = int(syscall(SYS_perf_event_open, &a, pid, -1, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) skip_test(std::string("perf_event_open refused: ") + strerror(errno));
    return UniqueFd(fd);
}

void burn(unsigned long n) {
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < n; ++i) x = x + i;
}

struct Recorder final : LoopHandler {
    int ring_events = 0, hups = 0;
    std::vector<int> write_results;  // by slot; 0 = not completed
    void on_ring(uint32_t, uint32_t, int revents) override {
        ++ring_events;
        if (revents < 0 || (revents & (POLLHUP | POLLERR))) ++hups;
    }
    void on_write(uint32_t slot, int res) override {
        REQUIRE(slot < write_results.size());
        CHECK(write_results[slot] == 0);  // delivered once
        write_results[slot] = res;
    }
    void on_source(Source) override {}
};

}  // namespace

TEST_CASE("kernel: poll(2) on a perf fd without a ring reports POLLHUP at once", "[loop][kernel]") {
    require_kernel();
    UniqueFd fd = open_sampling_event(0, false);
    pollfd p{fd.get(), POLLIN, 0};
    REQUIRE(::poll(&p, 1, 0) == 1);  // no waiting: it is "ready" immediately
    CHECK((p.revents & POLLHUP) != 0);
    CHECK((p.revents & POLLIN) == 0);
}

TEST_CASE("kernel: io_uring multishot poll on a perf fd without a ring: one POLLHUP CQE, then nothing",
          "[loop][kernel]") {
    require_kernel();
    UniqueFd fd = open_sampling_event(0, true);
    io_uring ring;
    REQUIRE(io_uring_queue_init(8, &ring, 0) == 0);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_poll_multishot(sqe, fd.get(), POLLIN);
    io_uring_sqe_set_data64(sqe, 1);
    REQUIRE(io_uring_submit(&ring) == 1);
    io_uring_cqe* cqe = nullptr;
    REQUIRE(io_uring_wait_cqe(&ring, &cqe) == 0);
    CHECK(cqe->user_data == 1);
    CHECK((cqe->res & POLLHUP) != 0);
    io_uring_cqe_seen(&ring, cqe);

    // Let the event overflow a few thousand times (each would wake a ring reader), then fence with
    // a NOP: no further poll completion may precede it.
    ioctl(fd.get(), PERF_EVENT_IOC_ENABLE, 0);
    burn(200'000'000);
    sqe = io_uring_get_sqe(&ring);
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, 2);
    REQUIRE(io_uring_submit(&ring) == 1);
    REQUIRE(io_uring_wait_cqe(&ring, &cqe) == 0);
    CHECK(cqe->user_data == 2);
    io_uring_cqe_seen(&ring, cqe);
    CHECK(io_uring_peek_cqe(&ring, &cqe) == -EAGAIN);
    io_uring_queue_exit(&ring);
}

TEST_CASE("the loop refuses to watch an fd whose ring is not mapped", "[loop]") {
    for (Backend b : {Backend::Uring, Backend::Epoll}) {
        LoopConfig cfg;
        cfg.backend = b;
        std::unique_ptr<Loop> loop;
        try {
            loop = make_loop(cfg, nullptr);
        } catch (const Error& e) {
            skip_test(std::string("loop backend unavailable: ") + e.what());
        }
        RingBuffer unmapped;  // the only way to get one without map(): empty
        CHECK_THROWS_AS(loop->watch_ring(0, 0, 0, unmapped), Error);
    }
}

TEST_CASE("a task's exit hangs up its fd once, after unwatch the loop never reports it again", "[loop][kernel]") {
    require_kernel();
    for (Backend b : {Backend::Uring, Backend::Epoll}) {
        INFO("backend " << (b == Backend::Uring ? "io_uring" : "epoll"));
        int go[2];
        REQUIRE(pipe2(go, O_CLOEXEC) == 0);
        pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            ::close(go[1]);  // else our own copy of the write end keeps read() from seeing EOF
            char c;
            (void)!read(go[0], &c, 1);
            burn(20'000'000);
            _exit(0);
        }
        ::close(go[0]);
        UniqueFd fd = open_sampling_event(child, false);
        auto ring = RingBuffer::map(fd.get(), 8);
        REQUIRE(ring);

        LoopConfig cfg;
        cfg.backend = b;
        auto loop = make_loop(cfg, nullptr);
        Recorder h;
        loop->watch_ring(0, 0, fd.get(), *ring);
        loop->run_once(h, false);
        ::close(go[1]);  // the child runs, samples, exits
        int status;
        REQUIRE(waitpid(child, &status, 0) == child);

        // Blocking waits until the hang-up arrives (data wake-ups may come first).
        int waits = 0;
        while (h.hups == 0 && waits < 100000) {
            loop->run_once(h, true);
            ++waits;
        }
        REQUIRE(h.hups == 1);
        loop->unwatch_ring(0, 0, fd.get());
        const int before = h.ring_events;
        for (int i = 0; i < 1000; ++i) loop->run_once(h, false);
        CHECK(h.ring_events == before);
        CHECK(h.hups == 1);
    }
}

TEST_CASE("io_uring: more writes than SQ and CQ entries are submitted and reaped, each delivered once", "[loop]") {
    require_uring();
    LoopConfig cfg;
    cfg.backend = Backend::Uring;
    cfg.rings = 0;
    cfg.writes_in_flight = 1;
    cfg.cq_entries = 2;  // SQ 2, CQ 2: the 64 writes below overflow both
    auto loop = make_loop(cfg, nullptr);
    char path[] = "/tmp/ringcap-loop-XXXXXX";
    UniqueFd fd(::mkstemp(path));
    REQUIRE(fd);
    ::unlink(path);
    const int files[1] = {fd.get()};
    loop->attach_output(files, {});
    constexpr uint32_t kWrites = 64, kLen = 512;
    std::vector<std::byte> buf(kWrites * kLen);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = std::byte(i / kLen);
    Recorder h;
    h.write_results.assign(kWrites, 0);
    // No run_once in between: the loop must find free SQEs itself (submit, and when the kernel takes
    // no more, set completions aside) instead of failing.
    for (uint32_t i = 0; i < kWrites; ++i) loop->write(i, 0, buf.data() + i * kLen, kLen, uint64_t(i) * kLen);
    int waits = 0;
    while (std::count(h.write_results.begin(), h.write_results.end(), 0) > 0 && waits < 10000) {
        loop->run_once(h, true);
        ++waits;
    }
    for (uint32_t i = 0; i < kWrites; ++i) CHECK(h.write_results[i] == int(kLen));
    CHECK(loop->stats().sq_full > 0);
    std::vector<std::byte> back(buf.size());
    REQUIRE(::pread(fd.get(), back.data(), back.size(), 0) == ssize_t(back.size()));
    CHECK(back == buf);
}

TEST_CASE("a watched source reports every time it becomes readable, on both backends", "[loop]") {
    // A collector's wake-up eventfd is written by the session many times (round requests, commands):
    // each must reach the collector, not only the first.
    const Backend be = GENERATE(Backend::Epoll, Backend::Uring);
    if (be == Backend::Uring) require_uring();
    LoopConfig cfg;
    cfg.backend = be;
    cfg.rings = 0;
    auto loop = make_loop(cfg, nullptr);
    UniqueFd efd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    REQUIRE(efd);
    struct Wakes final : LoopHandler {
        int fd = -1, wakes = 0;
        void on_ring(uint32_t, uint32_t, int) override {}
        void on_write(uint32_t, int) override {}
        void on_source(Source s) override {
            if (s != Source::Wake) return;
            ++wakes;
            uint64_t n;
            [[maybe_unused]] ssize_t r = ::read(fd, &n, sizeof n);  // consumed, as the collector does
        }
    } h;
    h.fd = efd.get();
    loop->watch_source(Source::Wake, efd.get());
    for (int i = 1; i <= 5; ++i) {
        const uint64_t one = 1;
        REQUIRE(::write(efd.get(), &one, sizeof one) == ssize_t(sizeof one));
        loop->run_once(h, true);  // blocks until the wake-up is delivered
        CHECK(h.wakes == i);
    }
}

TEST_CASE("io_uring: a registered-file update the kernel refuses leaves the prepared writes to the other files valid",
          "[loop][rotation]") {
    // Rotation replaces the next file's slots while SQEs for the previous file's slots are prepared
    // (Writer::queue_partial, then switch_to). A refused update must not take the table from them.
    require_uring();
    LoopConfig cfg;
    cfg.backend = Backend::Uring;
    cfg.rings = 0;
    cfg.writes_in_flight = 8;
    auto loop = make_loop(cfg, nullptr);
    char pa[] = "/tmp/ringcap-loop-XXXXXX", pb[] = "/tmp/ringcap-loop-XXXXXX";
    UniqueFd a(::mkstemp(pa)), b(::mkstemp(pb));
    REQUIRE(a);
    REQUIRE(b);
    ::unlink(pa);
    ::unlink(pb);
    const int files[4] = {a.get(), a.get(), a.get(), a.get()};  // as Writer attaches them
    loop->attach_output(files, {});
    constexpr uint32_t kLen = 4096;
    std::vector<std::byte> buf(4 * kLen);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = std::byte(1 + i / kLen);
    Recorder h;
    h.write_results.assign(5, 0);
    auto complete = [&](std::initializer_list<uint32_t> slots) {
        for (int waits = 0; waits < 100; ++waits) {
            bool all = true;
            for (uint32_t s : slots) all &= h.write_results[s] != 0;
            if (all) return;
            loop->run_once(h, true);
        }
        FAIL("writes not completed");
    };
    loop->write(0, 0, buf.data(), kLen, 0);  // prepared, not submitted
    loop->write(1, 1, buf.data() + kLen, kLen, kLen);
    // The kernel never registers an io_uring's own fd: the update fails (EBADF).
    io_uring other;
    REQUIRE(io_uring_queue_init(2, &other, 0) == 0);
    const int refused[2] = {other.ring_fd, other.ring_fd};
    loop->update_output(2, refused);
    complete({0, 1});
    CHECK(h.write_results[0] == int(kLen));
    CHECK(h.write_results[1] == int(kLen));
    // The previous file's slots still work (the rest of a short write goes there).
    loop->write(2, 0, buf.data() + 2 * kLen, kLen, 2 * kLen);
    complete({2});
    CHECK(h.write_results[2] == int(kLen));
    // The refused slots go to their own descriptor, never to what the table still holds there (A).
    loop->write(3, 2, buf.data() + 3 * kLen, kLen, 3 * kLen);
    complete({3});
    CHECK(h.write_results[3] < 0);
    io_uring_queue_exit(&other);
    struct stat st {};
    REQUIRE(::fstat(a.get(), &st) == 0);
    CHECK(st.st_size == 3 * kLen);
    std::vector<std::byte> back(3 * kLen);
    REQUIRE(::pread(a.get(), back.data(), back.size(), 0) == ssize_t(back.size()));
    CHECK(std::equal(back.begin(), back.end(), buf.begin()));
    // The next switch, to a file the kernel takes: written there.
    const int next[2] = {b.get(), b.get()};
    loop->update_output(2, next);
    loop->write(4, 3, buf.data(), kLen, 0);
    complete({4});
    CHECK(h.write_results[4] == int(kLen));
    REQUIRE(::pread(b.get(), back.data(), kLen, 0) == ssize_t(kLen));
    CHECK(std::equal(back.begin(), back.begin() + kLen, buf.begin()));
}
