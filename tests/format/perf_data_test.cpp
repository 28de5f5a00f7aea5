// The format layer, checked by the independent reader: a file built with build_file_head /
// build_features around synthetic samples must come back from `perf script` record for record.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "ringcap/events.hpp"
#include "ringcap/perf_data.hpp"
#include "format/feature_reader.hpp"
#include "tools.hpp"

using namespace ringcap;
using ringcap::testing::FeatReader;
using ringcap::testing::payload;

namespace {

// A sample in the default layout: IDENTIFIER, IP, TID, TIME, CPU, PERIOD.
struct Sample {
    perf_event_header h;
    uint64_t id, ip;
    uint32_t pid, tid;
    uint64_t time;
    uint32_t cpu, res;
    uint64_t period;
};
static_assert(sizeof(Sample) == 56);

}  // namespace

TEST_CASE("perf script reads a file built by the format layer record for record", "[format]") {
    const std::string perf = require_perf();
    // Ids right after the attrs, or after the features (where they go when events were opened
    // during the record and the ids outgrew the room before the data).
    const bool spill_ids = GENERATE(false, true);
    INFO((spill_ids ? "ids after the features" : "ids after the attrs"));

    std::vector<AttrEntry> attrs(2);
    SamplingConfig cfg;
    cfg.use_freq = false;
    cfg.period = 10007;
    attrs[0].attr = make_attr(parse_event("cpu-clock"), cfg);
    attrs[0].name = "cpu-clock";
    attrs[0].ids = {11, 12};
    attrs[1].attr = make_attr(parse_event("task-clock"), cfg);
    attrs[1].name = "task-clock";
    attrs[1].ids = {21, 22};

    std::vector<std::byte> data;
    auto put = [&](const void* p, size_t n) {
        auto* b = static_cast<const std::byte*>(p);
        data.insert(data.end(), b, b + n);
    };
    std::vector<std::string> expected;
    const int kSamples = 500;
    for (int i = 0; i < kSamples; ++i) {
        Sample s{};
        s.h = {PERF_RECORD_SAMPLE, PERF_RECORD_MISC_KERNEL, sizeof(Sample)};
        const int ev = i % 2, cpu = (i / 2) % 2;
        s.id = ev == 0 ? (cpu == 0 ? 11 : 12) : (cpu == 0 ? 21 : 22);
        s.ip = 0xffffffff81000000ull + uint64_t(i) * 16;
        s.pid = 1000 + uint32_t(i % 7);
        s.tid = s.pid + 1;
        s.time = 1'000'000'000ull + uint64_t(i) * 1000;  // increasing: perf sorts by time
        s.cpu = uint32_t(cpu);
        s.period = 10007 + uint64_t(i);
        put(&s, sizeof s);
        char line[256];
        std::snprintf(line, sizeof line, "%u/%u [%03u] %llu %llu %s %llx", s.pid, s.tid, s.cpu,
                      (unsigned long long)s.time, (unsigned long long)s.period, attrs[size_t(ev)].name.c_str(),
                      (unsigned long long)s.ip);
        expected.push_back(line);
        if (i % 100 == 99) {
            perf_event_header fr = finished_round_record();
            put(&fr, sizeof fr);
        }
    }

    TempFile f("format");
    const uint64_t data_off = data_offset_for(attrs);
    REQUIRE(data_off % 4096 == 0);
    HostInfo host = HostInfo::current({"ringcap", "record", "-a"});
    FeatureBlock feats = build_features(attrs, host, data_off + data.size());
    const uint64_t ids_at = spill_ids ? data_off + data.size() + feats.bytes.size() : 0;
    auto head = build_file_head(attrs, data_off, data.size(), feats.bitmap, ids_at);
    REQUIRE(head.size() == data_off);
    {
        std::ofstream out(f.path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
        out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
        out.write(reinterpret_cast<const char*>(feats.bytes.data()), std::streamsize(feats.bytes.size()));
        if (spill_ids) {
            const auto ids = build_ids_block(attrs);
            out.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size()));
        }
    }

    // --ns prints seconds with 9 decimals; awk drops the colons and the dot to get nanoseconds.
    auto r = run_command(perf + " script -i " + f.path +
                         " -F pid,tid,cpu,time,period,event,ip --ns 2>" + f.path + ".err"
                         " | awk '{gsub(\":\",\"\"); sub(\"\\\\.\", \"\", $3); print $1, $2, $3, $4, $5, $6}'");
    std::string err = read_file(f.path + ".err");
    std::remove((f.path + ".err").c_str());
    INFO("perf script stderr: " << err);
    REQUIRE(r.status == 0);
    CHECK(err.find("Warning") == std::string::npos);

    std::vector<std::string> got;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);) got.push_back(line);
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("record " << i);
        CHECK(got[i] == expected[i]);
    }

    // The header features come back too.
    auto hdr = run_command(perf + " script -i " + f.path + " --header-only 2>&1");
    CHECK(hdr.output.find("# hostname : " + host.hostname) != std::string::npos);
    CHECK(hdr.output.find("# os release : " + host.os_release) != std::string::npos);
    CHECK(hdr.output.find("# nrcpus online : " + std::to_string(host.nr_cpus_online)) != std::string::npos);
    CHECK(hdr.output.find("# cmdline : ") != std::string::npos);
    CHECK(hdr.output.find("record -a") != std::string::npos);
    CHECK(hdr.output.find("name = cpu-clock") != std::string::npos);
    CHECK(hdr.output.find("name = task-clock") != std::string::npos);
    CHECK(hdr.output.find("id = { 21, 22 }") != std::string::npos);
}

TEST_CASE("data section offset is 4 KiB aligned and grows with the ids", "[format]") {
    std::vector<AttrEntry> attrs(1);
    attrs[0].ids.resize(4);
    CHECK(data_offset_for(attrs) == 4096);
    attrs[0].ids.resize(1000);  // 8000 bytes of ids
    CHECK(data_offset_for(attrs) == 12288);
    const uint64_t none[4] = {0, 0, 0, 0};
    auto head = build_file_head(attrs, data_offset_for(attrs), 123, none);
    REQUIRE(head.size() == 12288);
    PerfFileHeader h;
    std::memcpy(&h, head.data(), sizeof h);
    CHECK(std::memcmp(h.magic, "PERFILE2", 8) == 0);
    CHECK(h.data.offset == 12288);
    CHECK(h.data.size == 123);
    CHECK(h.attr_size == sizeof(perf_event_attr) + sizeof(PerfFileSection));
}

namespace {

// A host with every optional feature, values chosen to show perf's rules: CPU 3 offline (-1), a
// die list, duplicate-free lists, a memory bitmap with a gap.
HostInfo fake_host() {
    HostInfo h;
    h.hostname = "fakehost";
    h.os_release = "6.1.0";
    h.version = "ringcap test";
    h.arch = "x86_64";
    h.nr_cpus_available = 4;
    h.nr_cpus_online = 3;
    h.cmdline = {"/bin/ringcap", "record"};
    h.cpudesc = "Fake CPU 9000";
    h.cpuid = "GenuineFake,6,85,7";
    h.total_mem_kb = 123456;
    CpuTopology t;
    t.packages = {"0-2"};
    t.cores = {"0-1", "2"};
    t.dies = {"0-2"};
    t.cpus = {{0, 0, 0}, {0, 0, 0}, {1, 0, 0}, {-1, -1, -1}};
    h.cpu_topology = t;
    h.numa_nodes = std::vector<NumaNode>{{0, 1000, 500, "0-2"}, {2, 64, 32, ""}};
    h.pmu_mappings = std::vector<PmuMapping>{{4, "cpu"}, {1, "software"}};
    h.caches = std::vector<CacheLevel>{{1, 64, 64, 8, "Data", "32K", "0-1"}, {2, 64, 1024, 8, "Unified", "512K", "0-2"}};
    h.mem_topology = MemTopology{0x8000000, {{0, {0, 1, 2, 5, 70}}, {1, {}}}};
    return h;
}

}  // namespace

TEST_CASE("host features: byte layout as perf's process_* functions read it", "[format][header]") {
    const HostInfo h = fake_host();
    const uint64_t start = 8192;
    const SampleTimeRange times{1000, 2000};
    const FeatureBlock fb = build_features({}, h, start, {}, {}, nullptr, &times);
    for (unsigned bit : {kFeatCpuDesc, kFeatCpuId, kFeatTotalMem, kFeatCpuTopology, kFeatNumaTopology,
                         kFeatPmuMappings, kFeatCache, kFeatSampleTime, kFeatMemTopology}) {
        INFO("feature " << bit);
        CHECK((fb.bitmap[0] >> bit & 1) == 1);
    }
    {
        auto p = payload(fb, start, kFeatCpuDesc);
        FeatReader r{p};
        CHECK(r.str() == "Fake CPU 9000");
        CHECK(r.at == p.size());
    }
    {
        auto p = payload(fb, start, kFeatCpuId);
        FeatReader r{p};
        CHECK(r.str() == "GenuineFake,6,85,7");
        CHECK(r.at == p.size());
    }
    CHECK(payload(fb, start, kFeatTotalMem).size() == 8);
    SECTION("CPU topology: packages, cores, {core, socket} per CPU, dies, die per CPU") {
        auto p = payload(fb, start, kFeatCpuTopology);
        FeatReader r{p};
        CHECK(r.get<uint32_t>() == 1);
        CHECK(r.str() == "0-2");
        CHECK(r.get<uint32_t>() == 2);
        CHECK(r.str() == "0-1");
        CHECK(r.str() == "2");
        const int32_t ids[4][2] = {{0, 0}, {0, 0}, {1, 0}, {-1, -1}};
        for (const auto& id : ids) {
            CHECK(r.get<int32_t>() == id[0]);
            CHECK(r.get<int32_t>() == id[1]);
        }
        CHECK(r.get<uint32_t>() == 1);
        CHECK(r.str() == "0-2");
        for (int32_t die : {0, 0, 0, -1}) CHECK(r.get<int32_t>() == die);
        CHECK(r.at == p.size());
    }
    SECTION("NUMA: nr, then id, total, free, cpu list") {
        auto p = payload(fb, start, kFeatNumaTopology);
        FeatReader r{p};
        CHECK(r.get<uint32_t>() == 2);
        CHECK(r.get<uint32_t>() == 0);
        CHECK(r.get<uint64_t>() == 1000);
        CHECK(r.get<uint64_t>() == 500);
        CHECK(r.str() == "0-2");
        CHECK(r.get<uint32_t>() == 2);
        CHECK(r.get<uint64_t>() == 64);
        CHECK(r.get<uint64_t>() == 32);
        CHECK(r.str() == "");
        CHECK(r.at == p.size());
    }
    SECTION("PMU mappings: nr, then type and name") {
        auto p = payload(fb, start, kFeatPmuMappings);
        FeatReader r{p};
        CHECK(r.get<uint32_t>() == 2);
        CHECK(r.get<uint32_t>() == 4);
        CHECK(r.str() == "cpu");
        CHECK(r.get<uint32_t>() == 1);
        CHECK(r.str() == "software");
        CHECK(r.at == p.size());
    }
    SECTION("caches: version 1, count, then level, line size, sets, ways, type, size, map") {
        auto p = payload(fb, start, kFeatCache);
        FeatReader r{p};
        CHECK(r.get<uint32_t>() == 1);
        CHECK(r.get<uint32_t>() == 2);
        for (const auto& c : *h.caches) {
            CHECK(r.get<uint32_t>() == c.level);
            CHECK(r.get<uint32_t>() == c.line_size);
            CHECK(r.get<uint32_t>() == c.sets);
            CHECK(r.get<uint32_t>() == c.ways);
            CHECK(r.str() == c.type);
            CHECK(r.str() == c.size);
            CHECK(r.str() == c.map);
        }
        CHECK(r.at == p.size());
    }
    SECTION("sample time: first, last") {
        auto p = payload(fb, start, kFeatSampleTime);
        FeatReader r{p};
        CHECK(r.get<uint64_t>() == 1000);
        CHECK(r.get<uint64_t>() == 2000);
        CHECK(r.at == p.size());
    }
    SECTION("memory topology: version, block size, nr; node, bits, bitmap (bits, words)") {
        auto p = payload(fb, start, kFeatMemTopology);
        FeatReader r{p};
        CHECK(r.get<uint64_t>() == 1);
        CHECK(r.get<uint64_t>() == 0x8000000);
        CHECK(r.get<uint64_t>() == 2);
        CHECK(r.get<uint64_t>() == 0);
        CHECK(r.get<uint64_t>() == 71);  // highest block + 1
        CHECK(r.get<uint64_t>() == 71);
        CHECK(r.get<uint64_t>() == 0b100111);
        CHECK(r.get<uint64_t>() == 1ull << 6);
        CHECK(r.get<uint64_t>() == 1);
        CHECK(r.get<uint64_t>() == 1);  // no blocks: perf still counts one bit
        CHECK(r.get<uint64_t>() == 1);
        CHECK(r.get<uint64_t>() == 0);
        CHECK(r.at == p.size());
    }
}

TEST_CASE("host features: left out when unknown, and sample time only for a valid range", "[format][header]") {
    HostInfo h = fake_host();
    h.cpudesc.reset();
    h.cpu_topology->cpus.pop_back();  // not one entry per available CPU: perf would misread it
    SampleTimeRange zero{0, 5}, backwards{9, 5};
    for (const SampleTimeRange* t : std::initializer_list<const SampleTimeRange*>{nullptr, &zero, &backwards}) {
        const FeatureBlock fb = build_features({}, h, 4096, {}, {}, nullptr, t);
        CHECK((fb.bitmap[0] >> kFeatSampleTime & 1) == 0);
        CHECK((fb.bitmap[0] >> kFeatCpuDesc & 1) == 0);
        CHECK((fb.bitmap[0] >> kFeatCpuTopology & 1) == 0);
        CHECK((fb.bitmap[0] >> kFeatCpuId & 1) == 1);
    }
    const FeatureBlock plain = build_features({}, HostInfo{}, 4096);
    CHECK((plain.bitmap[0] & ((1ull << kFeatCpuDesc) | (1ull << kFeatCache) | (1ull << kFeatMemTopology))) == 0);
}

TEST_CASE("host features: perf report --header-only -I shows the fake host", "[format][header]") {
    const std::string perf = require_perf();
    const SampleTimeRange times{1'500'000'000, 2'000'000'000};
    const auto hdr = ringcap::testing::perf_header_of(perf, fake_host(), &times);
    INFO(hdr);
    // Not checked: perf prints node 2's empty cpu list as "-1" and memory node 1's empty bitmap with
    // node 0's blocks (its display, not the file).
    for (const char* line : {"# cpudesc : Fake CPU 9000\n", "# cpuid : GenuineFake,6,85,7\n",
                             "# total memory : 123456 kB\n", "# sibling sockets : 0-2\n", "# sibling dies    : 0-2\n",
                             "# sibling threads : 0-1\n", "# sibling threads : 2\n",
                             "# CPU 2: Core ID 1, Die ID 0, Socket ID 0\n", "# CPU 3: Core ID -1, Die ID -1, Socket ID -1\n",
                             "# node0 meminfo  : total = 1000 kB, free = 500 kB\n", "# node2 meminfo  : total = 64 kB, free = 32 kB\n",
                             "# pmu mappings: cpu = 4, software = 1\n", "#  L2 Unified             512K [0-2]\n",
                             "# time of first sample : 1.500000\n", "# time of last sample : 2.000000\n",
                             "# memory nodes (nr 2, block size 0x8000000):\n", "#    0 [640M]: 0-2,5,70\n"})
        CHECK(hdr.find(line) != std::string::npos);
    const auto missing = hdr.substr(hdr.find("# missing features:"));
    for (const char* feat : {"CPUDESC", "CPUID", "TOTAL_MEM", "CPU_TOPOLOGY", "NUMA_TOPOLOGY", "PMU_MAPPINGS",
                             " CACHE", "SAMPLE_TIME", "MEM_TOPOLOGY"})
        CHECK(missing.find(feat) == std::string::npos);
}

TEST_CASE("host features: read from /proc and /sys as perf reads them", "[format][header]") {
    TempFile tag("hosttree");
    const std::string root = tag.path + ".d";
    auto put = [&](const std::string& rel, const std::string& text) {
        std::filesystem::create_directories(std::filesystem::path(root + rel).parent_path());
        std::ofstream(root + rel) << text;
    };
    put("/proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineFake\ncpu family\t: 6\nmodel\t\t: 85\n"
                         "model name\t: Fake(R)   CPU \t @ 2GHz\nstepping\t: 7\n\nprocessor\t: 1\n");
    put("/proc/meminfo", "MemTotal:       24683656 kB\nMemFree:  1 kB\n");
    const std::string cpu = "/sys/devices/system/cpu/";
    put(cpu + "online", "0-2\n");
    put(cpu + "possible", "0-3\n");
    for (int c = 0; c < 3; ++c) {
        const std::string t = cpu + "cpu" + std::to_string(c) + "/topology/";
        put(t + "package_cpus_list", "0-2\n");
        put(t + "core_siblings_list", "wrong: the newer name wins\n");
        put(t + "die_cpus_list", "0-2\n");
        put(t + "thread_siblings_list", c < 2 ? "0-1\n" : "2\n");  // the older name, alone
        put(t + "core_id", c < 2 ? "0\n" : "1\n");
        put(t + "physical_package_id", "0\n");
        put(t + "die_id", "0\n");
        for (int i = 0; i < 2; ++i) {  // L1 per core pair, L2 shared: listed once
            const std::string d = cpu + "cpu" + std::to_string(c) + "/cache/index" + std::to_string(i) + "/";
            put(d + "level", i == 0 ? "2\n" : "1\n");
            put(d + "coherency_line_size", "64\n");
            put(d + "number_of_sets", "64\n");
            put(d + "ways_of_associativity", "8\n");
            put(d + "type", i == 0 ? "Unified\n" : "Data\n");
            put(d + "size", i == 0 ? "512K\n" : "32K\n");
            put(d + "shared_cpu_list", i == 0 ? "0-2\n" : (c < 2 ? "0-1\n" : "2\n"));
        }
    }
    const std::string node = "/sys/devices/system/node/";
    put(node + "online", "0\n");
    put(node + "node0/meminfo", "Node 0 MemTotal:   9135904 kB\nNode 0 MemFree:  7250072 kB\n");
    put(node + "node0/cpulist", "0-2\n");
    for (const char* m : {"memory3", "memory1", "memory_failure"}) put(node + "node0/" + m + "/online", "1\n");
    put("/sys/devices/system/memory/block_size_bytes", "8000000\n");
    put("/sys/bus/event_source/devices/software/type", "1\n");
    put("/sys/bus/event_source/devices/notype/uevent", "\n");

    HostInfo h;
    h.arch = "x86_64";
    h.nr_cpus_available = 4;
    read_host_topology(h, {root + "/proc", root + "/sys"});
    std::filesystem::remove_all(root);

    CHECK(h.cpudesc == "Fake(R) CPU @ 2GHz");
    CHECK(h.cpuid == "GenuineFake,6,85,7");
    CHECK(h.total_mem_kb == 24683656u);
    REQUIRE(h.cpu_topology);
    CHECK(h.cpu_topology->packages == std::vector<std::string>{"0-2"});
    CHECK(h.cpu_topology->dies == std::vector<std::string>{"0-2"});
    CHECK(h.cpu_topology->cores == std::vector<std::string>{"0-1", "2"});
    REQUIRE(h.cpu_topology->cpus.size() == 4);
    CHECK(h.cpu_topology->cpus[2].core == 1);
    CHECK(h.cpu_topology->cpus[3].core == -1);  // offline: no topology directory
    CHECK(h.cpu_topology->cpus[3].socket == -1);
    REQUIRE(h.numa_nodes);
    REQUIRE(h.numa_nodes->size() == 1);
    CHECK((*h.numa_nodes)[0].mem_total_kb == 9135904);
    CHECK((*h.numa_nodes)[0].mem_free_kb == 7250072);
    CHECK((*h.numa_nodes)[0].cpus == "0-2");
    REQUIRE(h.pmu_mappings);
    REQUIRE(h.pmu_mappings->size() == 1);
    CHECK((*h.pmu_mappings)[0].name == "software");
    REQUIRE(h.caches);
    REQUIRE(h.caches->size() == 3);  // by level, first seen first: L1 [0-1], L1 [2], L2 [0-2]
    CHECK((*h.caches)[0].map == "0-1");
    CHECK((*h.caches)[1].map == "2");
    CHECK((*h.caches)[2].level == 2);
    CHECK((*h.caches)[2].size == "512K");
    REQUIRE(h.mem_topology);
    CHECK(h.mem_topology->block_size == 0x8000000);
    REQUIRE(h.mem_topology->nodes.size() == 1);
    auto blocks = h.mem_topology->nodes[0].blocks;
    std::sort(blocks.begin(), blocks.end());
    CHECK(blocks == std::vector<uint64_t>{1, 3});

    SECTION("a tree without these files: every feature left out, nothing thrown") {
        HostInfo e;
        e.arch = "x86_64";
        e.nr_cpus_available = 4;
        read_host_topology(e, {root + "/none", root + "/none"});
        CHECK_FALSE(e.cpudesc);
        CHECK_FALSE(e.cpuid);
        CHECK_FALSE(e.total_mem_kb);
        CHECK_FALSE(e.cpu_topology);
        CHECK_FALSE(e.numa_nodes);
        CHECK_FALSE(e.mem_topology);
        REQUIRE(e.pmu_mappings);  // perf writes empty lists for these
        CHECK(e.pmu_mappings->empty());
        REQUIRE(e.caches);
        CHECK(e.caches->empty());
    }
}
