// The record plan without the kernel: ring size, wake-up policy, attrs, staging and loop sizing.
#include <catch2/catch.hpp>

#include <tuple>

#include "ringcap/perf_source.hpp"
#include "ringcap/plan.hpp"

using namespace ringcap;

namespace {

HostLimits host(bool can_lock = false) {
    HostLimits h;
    h.page_size = 4096;
    h.can_lock_memory = can_lock;
    h.max_sample_rate = 100000;
    return h;
}

RecordOptions options(const std::vector<std::string>& args) { return parse_record_args(args); }

PerfTarget cpus(int n) {
    PerfTarget t;
    for (int c = 0; c < n; ++c) t.cpus.push_back(c);
    return t;
}

// A source whose fds stay readable, like the synthetic one.
struct EdgeOnlySource final : RingSource {
    std::vector<EventSpec> s{parse_event("cpu-clock")};
    const std::vector<EventSpec>& specs() const override { return s; }
    std::string describe() const override { return "test"; }
    size_t ring_count() const override { return 3; }
    size_t fd_count() const override { return 3; }
    bool level_triggered_ok() const override { return false; }
    void open(std::vector<perf_event_attr>&, size_t) override {}
    std::span<SourceRing> rings() override { return {}; }
    void enable() override {}
    void disable() override {}
    std::vector<LostReading> lost_counts() const override { return {}; }
};

}  // namespace

TEST_CASE("default ring size: perf's 128 pages, or up to 32 MiB per ring and 256 MiB in all with CAP_IPC_LOCK",
          "[plan]") {
    CHECK(default_ring_pages(2, false, 4096) == 128);
    CHECK(default_ring_pages(512, false, 4096) == 128);
    CHECK(default_ring_pages(1, true, 4096) == 8192);
    CHECK(default_ring_pages(2, true, 4096) == 8192);
    CHECK(default_ring_pages(8, true, 4096) == 8192);  // 8 x 32 MiB = 256 MiB
    CHECK(default_ring_pages(9, true, 4096) == 4096);
    CHECK(default_ring_pages(32, true, 4096) == 2048);
    CHECK(default_ring_pages(64, true, 4096) == 1024);
    CHECK(default_ring_pages(256, true, 4096) == 256);
    CHECK(default_ring_pages(4096, true, 4096) == 128);  // never below perf's default
}

TEST_CASE("a flight recorder's staging holds two wake-ups of its rings (half their data, 16 to 64 MiB), unless given",
          "[plan]") {
    PerfSource two({parse_event("cpu-clock")}, cpus(2)), forty({parse_event("cpu-clock")}, cpus(40));
    const RecordPlan p = RecordPlan::make(options({"-a", "--flight-recorder=30s"}), two, host(true));
    CHECK(p.ring_pages() == 8192);  // the rings of a file capture
    CHECK(p.staging_buffers() == 32);
    CHECK(RecordPlan::make(options({"-a", "--flight-recorder=30s"}), two, host(false)).staging_buffers() == 16);
    CHECK(RecordPlan::make(options({"-a", "--flight-recorder=30s"}), forty, host(true)).staging_buffers() == 64);
    const RecordPlan given =
        RecordPlan::make(options({"-a", "--flight-recorder=30s", "-m", "1024", "--staging-buffers", "8"}), two, host(true));
    CHECK(given.ring_pages() == 1024);
    CHECK(given.staging_buffers() == 8);
}

TEST_CASE("the plan takes -m as given, else the default for its ring count", "[plan]") {
    PerfSource two({parse_event("cpu-clock")}, cpus(2)), many({parse_event("cpu-clock")}, cpus(64));
    const RecordOptions dflt = options({"-a"});
    CHECK(RecordPlan::make(dflt, two, host(false)).ring_pages() == 128);
    CHECK(RecordPlan::make(dflt, two, host(true)).ring_pages() == 8192);
    CHECK(RecordPlan::make(dflt, many, host(true)).ring_pages() == 1024);
    CHECK_FALSE(RecordPlan::make(dflt, two, host(true)).ring_pages_given());
    const RecordPlan given = RecordPlan::make(options({"-a", "-m", "16"}), many, host(true));
    CHECK(given.ring_pages() == 16);
    CHECK(given.ring_pages_given());
}

TEST_CASE("wake-up policy: a quarter of the ring by default, user values kept, watermarks clamped to half",
          "[plan]") {
    PerfSource src({parse_event("cpu-clock")}, cpus(2));
    std::string note;
    const RecordPlan dflt = RecordPlan::make(options({"-a"}), src, host());
    SamplingConfig s = dflt.sampling(128, &note);
    CHECK(s.wakeup_watermark == 128 * 4096 / 4);
    CHECK(s.wakeup_events == 0);
    CHECK(note.empty());
    // The quarter follows the ring size, so halved rings wake at a quarter of their own size.
    CHECK(dflt.sampling(32).wakeup_watermark == 32 * 4096 / 4);

    s = RecordPlan::make(options({"-a", "--wakeup-events", "16"}), src, host()).sampling(128);
    CHECK(s.wakeup_events == 16);
    CHECK(s.wakeup_watermark == 0);

    s = RecordPlan::make(options({"-a", "--wakeup-watermark", "8192"}), src, host()).sampling(128, &note);
    CHECK(s.wakeup_watermark == 8192);
    CHECK(note.empty());

    s = RecordPlan::make(options({"-a", "--wakeup-watermark", "1000000"}), src, host()).sampling(8, &note);
    CHECK(s.wakeup_watermark == 8 * 4096 / 2);
    CHECK(note == "--wakeup-watermark 1000000 is more than half the 32768-byte ring; using 16384");
}

TEST_CASE("attrs: one per event plus the tracking event, the watermark reaches them", "[plan]") {
    PerfSource src(parse_event_list("cpu-clock,page-faults"), cpus(2));
    const RecordPlan plan = RecordPlan::make(options({"-a", "-F", "999"}), src, host());
    const auto attrs = plan.attrs(64);
    REQUIRE(attrs.size() == 3);
    CHECK(attrs[0].config == PERF_COUNT_SW_CPU_CLOCK);
    CHECK(attrs[0].freq == 1);
    CHECK(attrs[0].sample_freq == 999);
    CHECK(attrs[1].config == PERF_COUNT_SW_PAGE_FAULTS);
    CHECK(attrs[2].config == PERF_COUNT_SW_DUMMY);  // tracking: mmap, comm, task records
    CHECK(attrs[2].mmap2 == 1);
    CHECK(attrs[2].task == 1);
    for (const auto& a : attrs) {
        CHECK(a.disabled == 1);
        CHECK(a.watermark == 1);
        CHECK(a.wakeup_watermark == 64 * 4096 / 4);
        CHECK(a.inherit == 0);  // system-wide
        CHECK(a.enable_on_exec == 0);
    }
}

TEST_CASE("attrs of a per-task target inherit, a recorded command's start at its exec", "[plan]") {
    PerfTarget t = cpus(2);
    t.per_task = true;
    t.tids = {1};
    PerfSource pid_source({parse_event("cpu-clock")}, t);
    for (const auto& a : RecordPlan::make(options({"-p", "1"}), pid_source, host()).attrs(8)) {
        CHECK(a.inherit == 1);
        CHECK(a.enable_on_exec == 0);
    }
    t.at_exec = true;
    PerfSource cmd_source({parse_event("cpu-clock")}, t);
    for (const auto& a : RecordPlan::make(options({"--", "true"}), cmd_source, host()).attrs(8)) {
        CHECK(a.inherit == 1);
        CHECK(a.enable_on_exec == 1);
    }
}

TEST_CASE("plan: -F above kernel.perf_event_max_sample_rate is refused with the sysctl to change", "[plan]") {
    PerfSource src({parse_event("cpu-clock")}, cpus(1));
    try {
        RecordPlan::make(options({"-a", "-F", "200000"}), src, host());
        FAIL("accepted -F 200000 above a maximum of 100000");
    } catch (const Error& e) {
        CHECK(e.exit_code() == 2);
        CHECK(std::string(e.what()).find("sysctl -w kernel.perf_event_max_sample_rate=200000") != std::string::npos);
    }
    CHECK_NOTHROW(RecordPlan::make(options({"-a", "-F", "100000"}), src, host()));
}

TEST_CASE("staging: twice the rings' data, 64 to 256 MiB in 1 MiB buffers, unless given", "[plan]") {
    PerfSource two({parse_event("cpu-clock")}, cpus(2)), forty({parse_event("cpu-clock")}, cpus(40)),
        hundred({parse_event("cpu-clock")}, cpus(100));
    const RecordOptions o = options({"-a"});
    // perf's 512 KiB rings (no CAP_IPC_LOCK): 2 and 40 CPUs get the least, 100 twice their 50 MiB.
    // With the privilege, 2 CPUs' 32 MiB rings get 128 MiB; 40 CPUs' 4 MiB rings the most.
    const std::vector<std::tuple<PerfSource*, bool, size_t>> cases = {
        {&two, false, 64}, {&forty, false, 64}, {&hundred, false, 100}, {&two, true, 128}, {&forty, true, 256}};
    for (const auto& [s, lock, buffers] : cases) {
        INFO(s->ring_count() << " rings, can lock memory " << lock);
        const RecordPlan p = RecordPlan::make(o, *s, host(lock));
        CHECK(p.staging_buffers() == buffers);
        CHECK(p.staging_buffer_bytes() == 1024 * 1024);
        CHECK(p.loop().writes_in_flight == buffers);
    }
    // Larger buffers: the same memory in fewer of them.
    CHECK(RecordPlan::make(options({"-a", "--staging-kb", "4096"}), two, host(true)).staging_buffers() == 32);
    const RecordPlan given = RecordPlan::make(options({"-a", "--staging-buffers", "3", "--staging-kb", "64"}), two, host());
    CHECK(given.staging_buffers() == 3);
    CHECK(given.staging_buffer_bytes() == 64 * 1024);
    CHECK(given.loop().writes_in_flight == 3);
    CHECK(given.loop().rings == 2);
}

TEST_CASE("staging under a memory cgroup limit: fitted, with -z counting its encoded buffers, scratch and zstd context",
          "[plan]") {
    PerfSource two({parse_event("cpu-clock")}, cpus(2));
    for (const uint64_t limit : {8ull << 20, 16ull << 20, 48ull << 20, 256ull << 20}) {
        for (const bool z : {false, true}) {
            INFO("limit " << (limit >> 20) << " MiB" << (z ? ", -z" : ""));
            HostLimits h = host();
            h.memory_limit = limit;
            const RecordOptions o = options(z ? std::vector<std::string>{"-a", "-z"} : std::vector<std::string>{"-a"});
            const RecordPlan p = RecordPlan::make(o, two, h);
            const uint64_t need =
                RecordPlan::staging_memory(p.staging_buffers(), p.staging_buffer_bytes(), o.compression_level, 1);
            CHECK(need + RecordPlan::kMemoryHeadroom <= limit);
            CHECK(p.staging_buffers() >= 2);
            if (limit == 256ull << 20) CHECK(p.staging_buffers() == 64);
            else CHECK_FALSE(p.notes().empty());
        }
    }
    // -z needs more than staging alone: at 16 MiB the staging it gets is smaller.
    HostLimits h = host();
    h.memory_limit = 16ull << 20;
    const RecordPlan plain = RecordPlan::make(options({"-a"}), two, h), z = RecordPlan::make(options({"-a", "-z"}), two, h);
    CHECK(uint64_t(z.staging_buffers()) * z.staging_buffer_bytes() <
          uint64_t(plain.staging_buffers()) * plain.staging_buffer_bytes());
    // Given staging that does not fit with -z is refused, saying so.
    try {
        RecordPlan::make(options({"-a", "-z", "--staging-buffers", "8"}), two, h);
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(std::string(e.what()).find("and what -z needs with it does not fit") != std::string::npos);
    }
}

TEST_CASE("loop: the requested backend, but io_uring for a source whose fds stay readable", "[plan]") {
    PerfSource perf({parse_event("cpu-clock")}, cpus(2));
    CHECK(RecordPlan::make(options({"-a", "--backend", "epoll"}), perf, host()).loop().backend == Backend::Epoll);
    CHECK(RecordPlan::make(options({"-a"}), perf, host()).loop().backend == Backend::Auto);
    EdgeOnlySource edge;
    const RecordPlan p = RecordPlan::make(options({"-a", "--backend", "epoll", "--cq-entries", "8"}), edge, host());
    CHECK(p.loop().backend == Backend::Uring);
    CHECK(p.loop().cq_entries == 8);
    CHECK(p.loop().rings == 3);
}
