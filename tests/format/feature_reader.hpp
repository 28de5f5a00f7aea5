// Tests of the header features: reading a feature block back the way perf does, and showing a
// file built around it with `perf report --header-only -I`.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ringcap/events.hpp"
#include "ringcap/perf_data.hpp"
#include "ringcap/records.hpp"
#include "tools.hpp"

namespace ringcap::testing {

// A value of type T at byte `off` of `b`.
template <typename T>
T at(const std::vector<std::byte>& b, size_t off) {
    T v;
    REQUIRE(off + sizeof v <= b.size());
    std::memcpy(&v, b.data() + off, sizeof v);
    return v;
}

// Reads a payload in order, as perf's process_* functions do.
struct FeatReader {
    const std::vector<std::byte>& b;
    size_t at = 0;
    template <typename T>
    T get() {
        REQUIRE(at + sizeof(T) <= b.size());
        T v;
        std::memcpy(&v, b.data() + at, sizeof v);
        at += sizeof v;
        return v;
    }
    // perf_header_string: u32 padded length, then the NUL-padded bytes.
    std::string str() {
        const auto len = get<uint32_t>();
        CHECK(len % 64 == 0);
        REQUIRE(at + len <= b.size());
        std::string s(reinterpret_cast<const char*>(b.data() + at));
        CHECK(s.size() < len);
        at += len;
        return s;
    }
};

// {offset, size} of each feature in `fb` (which starts at file offset `start`), by bit.
inline std::map<unsigned, PerfFileSection> feature_sections(const FeatureBlock& fb, uint64_t start) {
    std::map<unsigned, PerfFileSection> out;
    size_t k = 0;
    for (unsigned bit = 0; bit < 256; ++bit) {
        if (!(fb.bitmap[bit / 64] >> (bit % 64) & 1)) continue;
        PerfFileSection s;
        std::memcpy(&s, fb.bytes.data() + k++ * sizeof s, sizeof s);
        REQUIRE(s.offset >= start);
        REQUIRE(s.offset - start + s.size <= fb.bytes.size());
        out[bit] = s;
    }
    return out;
}

// The payload of feature `bit`, read from its start to check that the reader ends at its size.
inline std::vector<std::byte> payload(const FeatureBlock& fb, uint64_t start, unsigned bit) {
    const auto secs = feature_sections(fb, start);
    REQUIRE(secs.count(bit) == 1);
    const auto& s = secs.at(bit);
    auto first = fb.bytes.begin() + ptrdiff_t(s.offset - start);
    return {first, first + ptrdiff_t(s.size)};
}

// `perf report --header-only -I` of a file holding one cpu-clock event (id 7), no samples (one
// FINISHED_ROUND), and `host`'s features.
inline std::string perf_header_of(const std::string& perf, const HostInfo& host,
                                  const SampleTimeRange* times = nullptr) {
    std::vector<AttrEntry> attrs(1);
    SamplingConfig cfg;
    attrs[0].attr = make_attr(parse_event("cpu-clock"), cfg);
    attrs[0].name = "cpu-clock";
    attrs[0].ids = {7};
    const uint64_t data_off = data_offset_for(attrs);
    const perf_event_header fr = finished_round_record();
    const FeatureBlock fb = build_features(attrs, host, data_off + sizeof fr, {}, {}, nullptr, times);
    TempFile f("format-host");
    {
        const auto head = build_file_head(attrs, data_off, sizeof fr, fb.bitmap);
        std::ofstream out(f.path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
        out.write(reinterpret_cast<const char*>(&fr), sizeof fr);
        out.write(reinterpret_cast<const char*>(fb.bytes.data()), std::streamsize(fb.bytes.size()));
    }
    return run_command(perf + " report -i " + f.path + " --header-only -I 2>&1").output;
}

}  // namespace ringcap::testing
