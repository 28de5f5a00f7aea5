// Pipe mode's head (build_pipe_head): its records laid out as perf 6.1 reads them, and perf script
// reading a pipe stream built around synthetic samples record for record.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ringcap/events.hpp"
#include "ringcap/perf_data.hpp"
#include "format/feature_reader.hpp"
#include "tools.hpp"

using namespace ringcap;

using ringcap::testing::at;

namespace {

struct Sample {  // IDENTIFIER, IP, TID, TIME, CPU, PERIOD
    perf_event_header h;
    uint64_t id, ip;
    uint32_t pid, tid;
    uint64_t time;
    uint32_t cpu, res;
    uint64_t period;
};
static_assert(sizeof(Sample) == 56);

std::vector<AttrEntry> two_events() {
    std::vector<AttrEntry> attrs(2);
    SamplingConfig cfg;
    cfg.use_freq = false;
    cfg.period = 10007;
    attrs[0].attr = make_attr(parse_event("cpu-clock"), cfg);
    attrs[0].name = "cpu-clock";
    attrs[0].ids = {11, 12};
    attrs[1].attr = make_attr(parse_event("task-clock"), cfg);
    attrs[1].name = "task-clock";
    attrs[1].ids = {21, 22, 23};
    return attrs;
}

}  // namespace

TEST_CASE("pipe head: header, one HEADER_ATTR per event, HEADER_FEATUREs, TRACING_DATA last", "[format][pipe]") {
    const auto attrs = two_events();
    HostInfo host = HostInfo::current({"ringcap", "record", "-a", "-o", "-"});
    const std::vector<std::byte> tracing(13, std::byte{0x5a});  // not a multiple of 8: padded
    CompressionFeature comp;
    comp.level = 3;
    comp.mmap_len = 1u << 20;
    const auto head = build_pipe_head(attrs, host, tracing, &comp);

    REQUIRE(head.size() >= 16);
    CHECK(std::memcmp(head.data(), "PERFILE2", 8) == 0);
    CHECK(at<uint64_t>(head, 8) == 16);

    size_t off = 16;
    for (const auto& a : attrs) {
        const auto h = at<perf_event_header>(head, off);
        CHECK(h.type == kRecordHeaderAttr);
        // perf 6.1 finds the ids after its own sizeof(perf_event_attr): 128.
        CHECK(h.size == sizeof(perf_event_header) + sizeof(perf_event_attr) + a.ids.size() * 8);
        const auto attr = at<perf_event_attr>(head, off + 8);
        CHECK(attr.size == sizeof(perf_event_attr));
        CHECK(attr.type == a.attr.type);
        CHECK(attr.config == a.attr.config);
        for (size_t i = 0; i < a.ids.size(); ++i)
            CHECK(at<uint64_t>(head, off + 8 + sizeof(perf_event_attr) + i * 8) == a.ids[i]);
        off += h.size;
    }

    std::vector<uint64_t> feats;
    while (at<perf_event_header>(head, off).type == kRecordHeaderFeature) {
        const auto h = at<perf_event_header>(head, off);
        CHECK(h.size % 8 == 0);
        feats.push_back(at<uint64_t>(head, off + 8));
        if (feats.back() == kFeatCompressed) {
            // u32 version 0, type 1 (zstd), level, ratio, mmap_len
            CHECK(at<uint32_t>(head, off + 16) == 0);
            CHECK(at<uint32_t>(head, off + 20) == 1);
            CHECK(at<uint32_t>(head, off + 24) == 3);
            CHECK(at<uint32_t>(head, off + 32) == (1u << 20));
        }
        off += h.size;
    }
    CHECK(std::is_sorted(feats.begin(), feats.end()));
    for (uint64_t f : {kFeatHostname, kFeatOsRelease, kFeatArch, kFeatNrCpus, kFeatCmdline, kFeatEventDesc, kFeatCompressed})
        CHECK(std::count(feats.begin(), feats.end(), f) == 1);
    // As perf record in pipe mode: no build-ids, no sample times; tracing data is a record of its own.
    for (uint64_t f : {kFeatBuildId, kFeatSampleTime, kFeatTracingData})
        CHECK(std::count(feats.begin(), feats.end(), f) == 0);
    // No HEADER_LAST_FEATURE mark (32): newer perf reads 32 as a feature of its own.
    CHECK(std::count(feats.begin(), feats.end(), 32) == 0);

    const auto h = at<perf_event_header>(head, off);
    CHECK(h.type == kRecordHeaderTracingData);
    CHECK(h.size == 16);
    CHECK(at<uint32_t>(head, off + 8) == 16);  // the payload rounded up to 8, not counted in h.size
    CHECK(head.size() == off + 16 + 16);
    CHECK(head[off + 16] == std::byte{0x5a});
    CHECK(head[off + 16 + 12] == std::byte{0x5a});
    CHECK(head[off + 16 + 13] == std::byte{0});

    // Without tracepoints or -z: neither record nor feature.
    const auto plain = build_pipe_head(attrs, host);
    CHECK(plain.size() < head.size());
}

TEST_CASE("pipe head: a feature too big for one record is left out, and said so", "[format][pipe]") {
    std::vector<AttrEntry> attrs(1);
    attrs[0].attr = make_attr(parse_event("cpu-clock"), SamplingConfig{});
    attrs[0].name = "cpu-clock";
    for (uint64_t i = 0; i < 7000; ++i) attrs[0].ids.push_back(i + 1);  // 56 KB: HEADER_ATTR and EVENT_DESC fit
    std::vector<unsigned> left_out;
    HostInfo host = HostInfo::current({"ringcap"});
    host.cmdline.assign(600, std::string(100, 'x'));  // 79 KB of CMDLINE do not
    const auto head = build_pipe_head(attrs, host, {}, nullptr, &left_out);
    CHECK(std::count(left_out.begin(), left_out.end(), kFeatEventDesc) == 0);
    CHECK(std::count(left_out.begin(), left_out.end(), kFeatCmdline) == 1);
    // Too many ids for one HEADER_ATTR: refused, never a truncated record.
    for (uint64_t i = 0; i < 2000; ++i) attrs[0].ids.push_back(100000 + i);
    CHECK_THROWS_AS(build_pipe_head(attrs, host), std::length_error);
}

TEST_CASE("perf script reads a pipe stream built by the format layer record for record", "[format][pipe]") {
    const std::string perf = require_perf();
    const auto attrs = two_events();
    std::vector<std::byte> stream = build_pipe_head(attrs, HostInfo::current({"ringcap", "record", "-o", "-"}));
    const int kSamples = 300;
    for (int i = 0; i < kSamples; ++i) {
        Sample s{};
        s.h = {PERF_RECORD_SAMPLE, PERF_RECORD_MISC_KERNEL, sizeof(Sample)};
        s.id = (i % 2) ? 21 + uint64_t(i % 3) : 11 + uint64_t(i % 2);
        s.ip = 0xffffffff81000000ull + uint64_t(i) * 16;
        s.pid = 1000;
        s.tid = 1001;
        s.time = 1'000'000'000ull + uint64_t(i) * 1000;
        s.cpu = uint32_t(i % 2);
        s.period = 10007;
        const auto* b = reinterpret_cast<const std::byte*>(&s);
        stream.insert(stream.end(), b, b + sizeof s);
        if (i % 100 == 99) {
            const perf_event_header fr = finished_round_record();
            const auto* f = reinterpret_cast<const std::byte*>(&fr);
            stream.insert(stream.end(), f, f + sizeof fr);
        }
    }
    TempFile f("pipehead");
    {
        std::ofstream out(f.path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(stream.data()), std::streamsize(stream.size()));
    }
    // Through a real pipe, as perf reads `-i -`.
    auto r = run_command("cat " + f.path + " | " + perf + " script -i - -F event 2>" + f.path + ".err | sort | uniq -c | tr -s ' '");
    const std::string err = read_file(f.path + ".err");
    std::remove((f.path + ".err").c_str());
    INFO("perf script stderr: " << err << "\nits output: " << r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("150 cpu-clock:") != std::string::npos);
    CHECK(r.output.find("150 task-clock:") != std::string::npos);
}
