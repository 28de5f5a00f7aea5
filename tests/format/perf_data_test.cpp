// The format layer, checked by the independent reader: a file built with build_file_head /
// build_features around synthetic samples must come back from `perf script` record for record.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "ringcap/events.hpp"
#include "ringcap/perf_data.hpp"
#include "tools.hpp"

using namespace ringcap;

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
