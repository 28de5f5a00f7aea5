// HEADER_CPU_PMU_CAPS, HEADER_PMU_CAPS, HEADER_BPF_PROG_INFO and HEADER_BPF_BTF: read from sysfs
// and from the kernel as perf 6.1 reads them, laid out as its process_* functions read them back,
// and shown by `perf report --header-only`.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stddef.h>

#include "format/bpf_load.hpp"
#include "format/feature_reader.hpp"
#include "ringcap/events.hpp"
#include "ringcap/perf_data.hpp"
#include "ringcap/records.hpp"
#include "tools.hpp"

using namespace ringcap;
using ringcap::testing::at;
using ringcap::testing::FeatReader;
using ringcap::testing::payload;
using ringcap::testing::perf_header_of;

namespace {

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
        const auto p = payload(fb, 4096, kFeatCpuPmuCaps);
        FeatReader r{p};
        CHECK(r.get<uint32_t>() == 2);
        CHECK(r.str() == "branches");
        CHECK(r.str() == "32");
        CHECK(r.str() == "max_precise");
        CHECK(r.str() == "3");
        CHECK(r.at == p.size());
    }
    {
        const auto p = payload(fb, 4096, kFeatPmuCaps);
        FeatReader r{p};
        CHECK(r.get<uint32_t>() == 1);  // PMUs
        CHECK(r.get<uint32_t>() == 1);  // their caps
        CHECK(r.str() == "zen4_ibs_extensions");
        CHECK(r.str() == "1");
        CHECK(r.str() == "ibs_op");
        CHECK(r.at == p.size());
    }
    h.pmu_caps->clear();
    const auto none = payload(build_features({}, h, 4096), 4096, kFeatPmuCaps);
    FeatReader empty{none};
    CHECK(empty.get<uint32_t>() == 0);
    CHECK(empty.at == none.size());
}

TEST_CASE("PMU caps: perf report --header-only shows them", "[format][header]") {
    const std::string perf = require_perf();
    HostInfo h = small_host();
    h.cpu_pmu_caps = PmuCapList{{"branches", "32"}, {"max_precise", "3"}};
    h.pmu_caps = std::vector<PmuCaps>{{"ibs_op", {{"zen4_ibs_extensions", "1"}}}};
    const std::string hdr = perf_header_of(perf, h);
    INFO(hdr);
    CHECK(hdr.find("# cpu pmu capabilities: branches=32, max_precise=3\n") != std::string::npos);
    CHECK(hdr.find("# ibs_op pmu capabilities: zen4_ibs_extensions=1\n") != std::string::npos);
    const auto missing = hdr.substr(hdr.find("# missing features:"));
    CHECK(missing.find("PMU_CAPS") == std::string::npos);
}

TEST_CASE("BPF: a loaded program and its BTF, described as perf's get_bpf_prog_info_linear does",
          "[format][header][bpf]") {
    std::string why;
    auto loaded = testing::load_test_bpf(&why);
    if (!loaded) skip_test("cannot load a BPF program here (" + why + ")");
    const BpfInfo info = read_bpf_info();
    REQUIRE(info.programs.count(loaded->prog_id) == 1);
    const auto& p = info.programs.at(loaded->prog_id);
    CHECK(at<uint32_t>(p, 0) == kPerfBpfProgInfoLen);  // info_len: perf 6.1's struct
    const uint32_t data_len = at<uint32_t>(p, 4);
    CHECK(at<uint64_t>(p, 8) == kPerfBpilArrays);
    CHECK(p.size() == 16 + kPerfBpfProgInfoLen + data_len);
    const size_t base = 16;
    CHECK(at<uint32_t>(p, base + offsetof(bpf_prog_info, id)) == loaded->prog_id);
    CHECK(std::string(reinterpret_cast<const char*>(p.data() + base + offsetof(bpf_prog_info, name))) == "ringcap_t");
    CHECK(at<uint32_t>(p, base + offsetof(bpf_prog_info, btf_id)) == loaded->btf_id);
    CHECK(at<uint32_t>(p, base + offsetof(bpf_prog_info, nr_jited_ksyms)) == 1);
    CHECK(at<uint32_t>(p, base + offsetof(bpf_prog_info, nr_prog_tags)) == 1);
    CHECK(at<uint32_t>(p, base + offsetof(bpf_prog_info, nr_func_info)) == 1);
    // The arrays are offsets into data (bpil_addr_to_offs), each inside it: the tag at its offset is
    // the program's tag.
    const uint64_t tags = at<uint64_t>(p, base + offsetof(bpf_prog_info, prog_tags));
    REQUIRE(tags + BPF_TAG_SIZE <= data_len);
    CHECK(std::memcmp(p.data() + base + kPerfBpfProgInfoLen + tags, p.data() + base + offsetof(bpf_prog_info, tag),
                      BPF_TAG_SIZE) == 0);
    const uint64_t insns = at<uint64_t>(p, base + offsetof(bpf_prog_info, jited_prog_insns));
    CHECK(insns + at<uint32_t>(p, base + offsetof(bpf_prog_info, jited_prog_len)) <= data_len);
    REQUIRE(info.btfs.count(loaded->btf_id) == 1);
    CHECK(info.btfs.at(loaded->btf_id) == loaded->btf_raw);  // the BTF as loaded, as libbpf hands it to perf

    const auto prog_payload = bpf_prog_info_payload(info);
    CHECK(at<uint32_t>(prog_payload, 0) == info.programs.size());
    const auto btf_payload = bpf_btf_payload(info);
    CHECK(at<uint32_t>(btf_payload, 0) == info.btfs.size());
    CHECK(at<uint32_t>(btf_payload, 4) == info.btfs.begin()->first);
    CHECK(at<uint32_t>(btf_payload, 8) == info.btfs.begin()->second.size());

    BpfInfo later;
    later.merge(info);
    BpfInfo none;
    later.merge(none);
    CHECK(later.programs.count(loaded->prog_id) == 1);  // an unloaded program stays described
}

TEST_CASE("BPF: perf report --header-only names the program from our BTF", "[format][header][bpf]") {
    const std::string perf = require_perf();
    std::string why;
    auto loaded = testing::load_test_bpf(&why);
    if (!loaded) skip_test("cannot load a BPF program here (" + why + ")");
    HostInfo h = small_host();
    h.bpf = read_bpf_info();
    const std::string hdr = perf_header_of(perf, h);
    INFO(hdr);
    // The function's name is in the BTF only (the program is named ringcap_t): perf read both.
    const std::string prefix = "# bpf_prog_info " + std::to_string(loaded->prog_id) + ": bpf_prog_";
    const auto at = hdr.find(prefix);
    REQUIRE(at != std::string::npos);
    const std::string line = hdr.substr(at, hdr.find('\n', at) - at);
    CHECK(line.find("_ringcap_f addr 0x") != std::string::npos);
    CHECK(hdr.find("# btf info of id " + std::to_string(loaded->btf_id) + "\n") != std::string::npos);
    const auto missing = hdr.substr(hdr.find("# missing features:"));
    CHECK(missing.find("BPF_PROG_INFO") == std::string::npos);
    CHECK(missing.find("BPF_BTF") == std::string::npos);
}
