// HEADER_CPU_PMU_CAPS and HEADER_PMU_CAPS: read from sysfs as perf 6.1 reads them, laid out as its
// process_* functions read them back, and shown by `perf report --header-only`.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ringcap/events.hpp"
#include "ringcap/perf_data.hpp"
#include "ringcap/records.hpp"
#include "tools.hpp"

using namespace ringcap;

namespace {

struct Reader {
    std::vector<std::byte> b;
    size_t at = 0;
    template <typename T>
    T get() {
        REQUIRE(at + sizeof(T) <= b.size());
        T v;
        std::memcpy(&v, b.data() + at, sizeof v);
        at += sizeof v;
        return v;
    }
    std::string str() {  // perf_header_string: u32 length padded to 64, NUL-padded bytes
        const auto len = get<uint32_t>();
        CHECK(len % 64 == 0);
        REQUIRE(at + len <= b.size());
        std::string s(reinterpret_cast<const char*>(b.data() + at));
        at += len;
        return s;
    }
};

// Feature `bit` of a block built at file offset `start`.
Reader feature(const FeatureBlock& fb, uint64_t start, unsigned bit) {
    REQUIRE((fb.bitmap[bit / 64] >> (bit % 64) & 1) == 1);
    size_t k = 0;
    for (unsigned i = 0; i < bit; ++i) k += fb.bitmap[i / 64] >> (i % 64) & 1;
    PerfFileSection s;
    std::memcpy(&s, fb.bytes.data() + k * sizeof s, sizeof s);
    auto first = fb.bytes.begin() + ptrdiff_t(s.offset - start);
    return Reader{{first, first + ptrdiff_t(s.size)}};
}

HostInfo small_host() {
    HostInfo h;
    h.hostname = "fakehost";
    h.os_release = "6.1.0";
    h.version = "ringcap test";
    h.arch = "x86_64";
    h.nr_cpus_available = h.nr_cpus_online = 1;
    h.cmdline = {"/bin/ringcap", "record"};
    return h;
}

// `perf report --header-only -I` of a file holding one event, no samples, and `host`'s features.
std::string perf_header(const std::string& perf, const HostInfo& host) {
    std::vector<AttrEntry> attrs(1);
    SamplingConfig cfg;
    attrs[0].attr = make_attr(parse_event("cpu-clock"), cfg);
    attrs[0].name = "cpu-clock";
    attrs[0].ids = {7};
    const uint64_t data_off = data_offset_for(attrs);
    const perf_event_header fr = finished_round_record();
    const FeatureBlock fb = build_features(attrs, host, data_off + sizeof fr);
    TempFile f("header-features");
    {
        const auto head = build_file_head(attrs, data_off, sizeof fr, fb.bitmap);
        std::ofstream out(f.path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
        out.write(reinterpret_cast<const char*>(&fr), sizeof fr);
        out.write(reinterpret_cast<const char*>(fb.bytes.data()), std::streamsize(fb.bytes.size()));
    }
    return run_command(perf + " report -i " + f.path + " --header-only -I 2>&1").output;
}

}  // namespace

TEST_CASE("PMU caps: read from sysfs as perf_pmu__caps_parse reads them", "[format][header]") {
    TempFile tag("pmutree");
    const std::string root = tag.path + ".d", dev = root + "/bus/event_source/devices/";
    auto put = [&](const std::string& rel, const std::string& text) {
        std::filesystem::create_directories(std::filesystem::path(dev + rel).parent_path());
        std::ofstream(dev + rel) << text;
    };
    put("cpu/caps/max_precise", "3\n");
    put("cpu/caps/branches", "32\n");
    put("ibs_op/caps/zen4_ibs_extensions", "1\n");
    put("ibs_op/caps/noline", "7");            // perf drops the last character, newline or not
    put("ibs_op/caps/empty", "");              // perf skips what fgets cannot read
    put("cpu_core/caps/pmu_name", "alderlake_hybrid\n");
    put("software/type", "1\n");               // no caps: not listed
    std::filesystem::create_directories(dev + "msr/caps");  // empty caps: not listed
    HostInfo h;
    h.arch = "x86_64";
    read_host_topology(h, {root + "/proc", root});

    REQUIRE(h.cpu_pmu_caps);
    auto cpu = *h.cpu_pmu_caps;
    std::sort(cpu.begin(), cpu.end());
    CHECK(cpu == PmuCapList{{"branches", "32"}, {"max_precise", "3"}});
    REQUIRE(h.pmu_caps);
    REQUIRE(h.pmu_caps->size() == 2);
    CHECK((*h.pmu_caps)[0].pmu == "cpu_core");  // hybrid core PMUs first, as perf writes them
    CHECK((*h.pmu_caps)[0].caps == PmuCapList{{"pmu_name", "alderlake_hybrid"}});
    CHECK((*h.pmu_caps)[1].pmu == "ibs_op");
    auto ibs = (*h.pmu_caps)[1].caps;
    std::sort(ibs.begin(), ibs.end());
    CHECK(ibs == PmuCapList{{"noline", ""}, {"zen4_ibs_extensions", "1"}});

    SECTION("no cpu PMU: CPU_PMU_CAPS left out; PMU_CAPS written empty, as perf") {
        std::filesystem::remove_all(dev + "cpu");
        HostInfo e;
        read_host_topology(e, {root + "/proc", root + "/none"});
        CHECK_FALSE(e.cpu_pmu_caps);
        REQUIRE(e.pmu_caps);
        CHECK(e.pmu_caps->empty());
    }
    std::filesystem::remove_all(root);
}

TEST_CASE("PMU caps: laid out as process_cpu_pmu_caps and process_pmu_caps read them", "[format][header]") {
    HostInfo h = small_host();
    h.cpu_pmu_caps = PmuCapList{{"branches", "32"}, {"max_precise", "3"}};
    h.pmu_caps = std::vector<PmuCaps>{{"ibs_op", {{"zen4_ibs_extensions", "1"}}}};
    const FeatureBlock fb = build_features({}, h, 4096);
    {
        Reader r = feature(fb, 4096, kFeatCpuPmuCaps);
        CHECK(r.get<uint32_t>() == 2);
        CHECK(r.str() == "branches");
        CHECK(r.str() == "32");
        CHECK(r.str() == "max_precise");
        CHECK(r.str() == "3");
        CHECK(r.at == r.b.size());
    }
    {
        Reader r = feature(fb, 4096, kFeatPmuCaps);
        CHECK(r.get<uint32_t>() == 1);  // PMUs
        CHECK(r.get<uint32_t>() == 1);  // their caps
        CHECK(r.str() == "zen4_ibs_extensions");
        CHECK(r.str() == "1");
        CHECK(r.str() == "ibs_op");
        CHECK(r.at == r.b.size());
    }
    h.pmu_caps->clear();
    Reader empty = feature(build_features({}, h, 4096), 4096, kFeatPmuCaps);
    CHECK(empty.get<uint32_t>() == 0);
    CHECK(empty.at == empty.b.size());
}

TEST_CASE("PMU caps: perf report --header-only shows them", "[format][header]") {
    const std::string perf = require_perf();
    HostInfo h = small_host();
    h.cpu_pmu_caps = PmuCapList{{"branches", "32"}, {"max_precise", "3"}};
    h.pmu_caps = std::vector<PmuCaps>{{"ibs_op", {{"zen4_ibs_extensions", "1"}}}};
    const std::string hdr = perf_header(perf, h);
    INFO(hdr);
    CHECK(hdr.find("# cpu pmu capabilities: branches=32, max_precise=3\n") != std::string::npos);
    CHECK(hdr.find("# ibs_op pmu capabilities: zen4_ibs_extensions=1\n") != std::string::npos);
    const auto missing = hdr.substr(hdr.find("# missing features:"));
    CHECK(missing.find("PMU_CAPS") == std::string::npos);
}
