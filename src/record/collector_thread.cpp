#include "ringcap/collector_thread.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

namespace ringcap {

CollectorThread::CollectorThread(Setup setup) : setup_(std::move(setup)) {
    wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd_) throw Error("eventfd: " + errno_text(errno));
    thread_ = std::thread([this] { body(); });
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return phase_ != Phase::Starting; });
    if (phase_ == Phase::Failed) {
        lock.unlock();
        thread_.join();
        std::rethrow_exception(error_);
    }
}

CollectorThread::~CollectorThread() {
    if (!thread_.joinable()) return;
    request_stop();
    {
        std::lock_guard lock(mu_);
        if (phase_ == Phase::Ready) phase_ = Phase::Drained;  // never started: just leave
        else if (phase_ == Phase::Running || phase_ == Phase::Stopped) phase_ = Phase::Draining;
    }
    cv_.notify_all();
    thread_.join();
}

void CollectorThread::set_phase(Phase p) {
    {
        std::lock_guard lock(mu_);
        phase_ = p;
    }
    cv_.notify_all();
}

void CollectorThread::wait_phase(Phase p) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return phase_ == p; });
}

void CollectorThread::wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
}

void CollectorThread::body() {
    try {
        if (!setup_.cpus.empty()) {
            // Near its rings: the records it copies were just written there.
            cpu_set_t set;
            CPU_ZERO(&set);
            for (int c : setup_.cpus) CPU_SET(c, &set);
            pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        }
        collector_ = std::make_unique<Collector>(setup_.config, setup_.rings, static_cast<CollectorControl&>(*this),
                                                 *setup_.log);
        collector_->attach(*setup_.file, *setup_.space);
        collector_->watch_control(Source::Wake, wake_fd_.get());
        collector_->arm();
        fallback_reason_ = collector_->fallback_reason();
        nice_ = collector_->nice();
        nice_refused_ = collector_->nice_refused();
        realtime_ = collector_->realtime();
        realtime_refused_ = collector_->realtime_refused();
        backend_ = collector_->loop().name();
        describe_ = collector_->loop().describe();
    } catch (...) {
        error_ = std::current_exception();
        collector_.reset();
        set_phase(Phase::Failed);
        return;
    }
    set_phase(Phase::Ready);
    {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return phase_ != Phase::Ready; });
        if (phase_ == Phase::Drained) {  // never started
            lock.unlock();
            collector_.reset();
            return;
        }
    }
    cause_ = collector_->run();
    // Until the session drains it, this loop stops running: an allocation of its own still under
    // way must finish first, or the other collectors would hold their writes for it meanwhile.
    collector_->writer().settle_allocation(collector_.get());
    if (cause_ == StopCause::AllHungUp) {
        // Every fd hung up: nothing more comes. What its rings hold goes to the file now, so that
        // the rounds that follow need nothing more of it (it takes no part in them).
        collector_->drain_rest();
        collector_->flush();
        if (collector_->writer().failed()) cause_ = StopCause::WriteError;
        else emptied_.store(true, std::memory_order_release);
    }
    if (!stop_.load()) {
        ended_.store(true, std::memory_order_release);
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(setup_.done_fd, &one, sizeof one);
    }
    {
        std::unique_lock lock(mu_);
        if (phase_ == Phase::Running) phase_ = Phase::Stopped;
        cv_.notify_all();
        cv_.wait(lock, [this] { return phase_ == Phase::Draining; });
    }
    collector_->drain_rest();
    collector_->flush();
    if (collector_->writer().failed()) cause_ = StopCause::WriteError;
    // A switch it never acknowledged (it stopped first: a write error, or the record ended): all it
    // wrote is in the file the session finishes as the previous one. Taken now, so that where its
    // writer failed counts there (previous_failed_offset), and nothing it owes counts in the next one.
    switch_if_asked(0);
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    {
        std::lock_guard lock(mu_);
        published_ = collector_->snapshot();
        cpu_seconds_ = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
        final_owed_ = collector_->writer().published_owed();
        final_kept_end_ = collector_->writer().published_kept_end();
        final_error_ = collector_->writer().error();
        // Drained: every write completed, the previous file's too.
        if (!previous_settled_.load()) previous_failed_ = collector_->writer().previous_failed_offset();
    }
    previous_settled_.store(true, std::memory_order_release);
    collector_.reset();  // here: its io_uring lets go of the output file now
    set_phase(Phase::Drained);
}

uint64_t CollectorThread::owed() const {
    // Live until drained (the session only asks while it runs, or once drain() returned).
    std::lock_guard lock(mu_);
    return phase_ == Phase::Drained ? final_owed_ : collector_->writer().published_owed();
}

uint64_t CollectorThread::kept_end() const {
    std::lock_guard lock(mu_);
    return phase_ == Phase::Drained ? final_kept_end_ : collector_->writer().published_kept_end();
}

int CollectorThread::write_error() const {
    std::lock_guard lock(mu_);
    return phase_ == Phase::Drained ? final_error_ : collector_->writer().error();
}

void CollectorThread::start() {
    publish_snapshot();
    set_phase(Phase::Running);
}

void CollectorThread::request_stop() {
    stop_.store(true, std::memory_order_release);
    wake();
}

void CollectorThread::drain() {
    request_stop();
    {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return phase_ == Phase::Stopped || phase_ == Phase::Drained; });
        if (phase_ == Phase::Drained) return;
        phase_ = Phase::Draining;
    }
    cv_.notify_all();
    wait_phase(Phase::Drained);
}

void CollectorThread::request_round(uint64_t k, bool written) {
    if (written) round_written_.store(k, std::memory_order_relaxed);  // published by the release below
    round_request_.store(k, std::memory_order_release);
    wake();
}

void CollectorThread::request_switch(uint64_t k, OutputFile* file, FileSpace* space) {
    std::lock_guard lock(mu_);
    switch_round_ = k;
    switch_file_ = file;
    switch_space_ = space;
}

CollectorThread::SwitchPoint CollectorThread::switch_point() const {
    std::lock_guard lock(mu_);
    return switch_point_;
}

bool CollectorThread::previous_settled() const { return previous_settled_.load(std::memory_order_acquire); }

uint64_t CollectorThread::previous_failed_offset() const {
    std::lock_guard lock(mu_);
    return previous_failed_;
}

void CollectorThread::execute(std::function<void(Collector&)> command) {
    std::unique_lock lock(mu_);
    if (phase_ != Phase::Running) return;  // it stopped: nothing to do any more
    commands_.push_back(std::move(command));
    const uint64_t mine = ++commands_sent_;
    has_commands_.store(true, std::memory_order_release);
    lock.unlock();
    wake();
    lock.lock();
    cv_.wait(lock, [&] { return commands_done_ >= mine || phase_ != Phase::Running; });
}

void CollectorThread::on_control(Source s) {
    if (s != Source::Wake) return;
    uint64_t n;
    [[maybe_unused]] ssize_t r = ::read(wake_fd_.get(), &n, sizeof n);  // level-triggered under epoll: clear it
}

void CollectorThread::before_pass() {
    // A new round request: every ring's head now is what the acknowledgement must have drained.
    const uint64_t req = round_request_.load(std::memory_order_acquire);
    if (req > marked_for_ && req > round_done_.load(std::memory_order_relaxed)) {
        collector_->mark_heads();
        marked_for_ = req;
        collector_->round_requested();
    }
}

void CollectorThread::after_pass(bool /*complete*/) {
    last_time_.store(collector_->last_time(), std::memory_order_relaxed);
    if (!first_time_.load(std::memory_order_relaxed)) first_time_.store(collector_->first_time(), std::memory_order_relaxed);
    // A round: every collector drained each of its rings past the head it had when it saw the
    // request, and queued what it drained (its offsets are reserved before the acknowledgement, so
    // below the marker). That takes one complete pass, or several when staging runs short: under
    // back-pressure a pass rarely empties every ring, and the rounds (so rotation and the reader's
    // memory) must not wait for one that does. With -z the flush completes on a later pass, once the
    // encoder thread finished what was staged: the acknowledgement waits for it (and the rings are
    // drained meanwhile).
    if (!ack_for_ && marked_for_ > round_done_.load(std::memory_order_relaxed) && collector_->drained_past_marks()) {
        collector_->request_flush();
        ack_for_ = marked_for_;
        ack_written_end_ = 0;
    }
    // A round that waits for its writes: everything queued up to the flush (reserved by then) has
    // completed. The write's completion wakes this loop, so that costs no wake-up of its own.
    bool written = true;
    if (ack_for_ && !collector_->flush_pending() && round_written_.load(std::memory_order_relaxed) >= ack_for_) {
        if (!ack_written_end_) ack_written_end_ = collector_->writer().reserved_end();
        written = collector_->writer().owed() >= ack_written_end_;
    }
    if (ack_for_ && !collector_->flush_pending() && written) {
        // Rotation: what this pass and the ones before drained is queued for the current file; the
        // rest goes to the next one.
        switch_if_asked(ack_for_);
        collector_->hand_over_sideband();  // the window's start may pass what was drained so far
        round_done_.store(ack_for_, std::memory_order_release);
        ack_for_ = 0;
        // The session writes the marker as soon as the last collector acknowledged (one write per
        // round, not per record).
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(setup_.done_fd, &one, sizeof one);
    }
    if (!previous_settled_.load(std::memory_order_relaxed) && collector_->writer().previous_in_flight() == 0) {
        {
            std::lock_guard lock(mu_);
            previous_failed_ = collector_->writer().previous_failed_offset();
        }
        previous_settled_.store(true, std::memory_order_release);
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(setup_.done_fd, &one, sizeof one);
    }
    if (has_commands_.load(std::memory_order_acquire)) {
        std::vector<std::function<void(Collector&)>> todo;
        {
            std::lock_guard lock(mu_);
            todo.swap(commands_);
            has_commands_.store(false, std::memory_order_relaxed);
        }
        for (auto& c : todo) c(*collector_);
        {
            std::lock_guard lock(mu_);
            commands_done_ += todo.size();
        }
        cv_.notify_all();
    }
}

void CollectorThread::switch_if_asked(uint64_t round) {
    OutputFile* file = nullptr;
    FileSpace* space = nullptr;
    uint64_t at = 0;
    {
        std::lock_guard lock(mu_);
        if (switch_round_ == 0 || (round != 0 && round != switch_round_)) return;
        at = switch_round_;
        file = switch_file_;
        space = switch_space_;
        switch_round_ = 0;
    }
    // Counted here, at the boundary (before the time range restarts). Not under mu_: the switch may
    // run the loop, whose tick takes it.
    SwitchPoint sp{at, collector_->snapshot()};
    previous_settled_.store(false, std::memory_order_relaxed);
    collector_->switch_output(*file, *space);
    std::lock_guard lock(mu_);
    switch_point_ = std::move(sp);
    previous_failed_ = UINT64_MAX;  // this switch's from now on, never an earlier one's
}

void CollectorThread::publish_snapshot() {
    CollectorSnapshot s = collector_->snapshot();
    std::lock_guard lock(mu_);
    published_ = std::move(s);
}

CollectorSnapshot CollectorThread::snapshot() const {
    std::lock_guard lock(mu_);
    return published_;
}

double CollectorThread::cpu_seconds() const {
    std::lock_guard lock(mu_);
    return cpu_seconds_;
}

std::string cpu_group_key(const std::string& threads, int cpu) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu);
    auto read = [](const std::string& path) {
        auto t = read_text_file(path);
        return t ? t->substr(0, t->find('\n')) : std::string("?");
    };
    if (threads == "package") return read(base + "/topology/physical_package_id");
    if (threads == "core") return read(base + "/topology/physical_package_id") + ":" + read(base + "/topology/core_id");
    if (threads == "numa") {
        for (int node = 0; node < 4096; ++node)
            if (::access((base + "/node" + std::to_string(node)).c_str(), F_OK) == 0) return std::to_string(node);
        return "0";
    }
    return std::to_string(cpu);
}

std::vector<int> cpu_order(const std::string& threads, std::vector<int> cpus) {
    if (threads != "core" && threads != "package" && threads != "numa") return cpus;
    std::map<int, std::string> key;
    for (int c : cpus) key[c] = cpu_group_key(threads, c);
    std::stable_sort(cpus.begin(), cpus.end(), [&](int a, int b) { return key[a] < key[b]; });
    return cpus;
}

bool valid_threads_spec(const std::string& spec) {
    if (spec == "cpu" || spec == "core" || spec == "package" || spec == "numa") return true;
    return !spec.empty() && spec.size() < 6 && std::all_of(spec.begin(), spec.end(), ::isdigit) && std::stoul(spec) > 0;
}

std::vector<size_t> split_rings(const std::string& threads, const std::vector<int>& cpus) {
    const size_t n = cpus.size();
    if (n == 0) return {};
    auto even = [n](size_t parts) {
        parts = std::clamp<size_t>(parts, 1, n);
        std::vector<size_t> sizes(parts, n / parts);
        for (size_t i = 0; i < n % parts; ++i) ++sizes[i];
        return sizes;
    };
    if (threads.empty()) return even(std::min(n, kDefaultCollectors));
    if (threads == "cpu") return even(n);
    if (std::all_of(threads.begin(), threads.end(), ::isdigit)) return even(std::stoul(threads));
    // core, package, numa: runs of consecutive rings whose CPUs share the group (cpu_group_key).
    std::vector<size_t> sizes;
    std::string prev;
    for (size_t i = 0; i < n; ++i) {
        const std::string key = cpu_group_key(threads, cpus[i]);
        if (i == 0 || key != prev) sizes.push_back(0);
        ++sizes.back();
        prev = key;
    }
    return sizes;
}

}  // namespace ringcap
