// The encoder on its own: records in, PERF_RECORD_COMPRESSED records out, decoded with libzstd the
// way perf 6.1 decodes them (one stream, one decompression call loop per record).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>
#include <zstd.h>

#include "ringcap/encoder.hpp"
#include "ringcap/records.hpp"

using namespace ringcap;

namespace {

// Whole records of `n` bytes each (a dwarf-like sample: a header, then a stack that repeats with
// small changes, or random bytes), filling `bytes`.
std::vector<std::byte> make_records(size_t bytes, size_t n, bool random, uint32_t seed = 1) {
    std::vector<std::byte> b(bytes);
    std::mt19937 rng(seed);
    for (size_t at = 0; at + n <= bytes; at += n) {
        const perf_event_header h{PERF_RECORD_SAMPLE, 0, uint16_t(n)};
        std::memcpy(b.data() + at, &h, sizeof h);
        for (size_t i = sizeof h; i < n; ++i)
            b[at + i] = std::byte(random ? rng() : (i % 64 == 0 ? rng() : i * 7 / 64));
    }
    b.resize(bytes / n * n);
    return b;
}

struct Decoded {
    std::vector<std::byte> bytes;
    size_t records = 0;
    size_t empty_records = 0;  // decompressed to nothing: perf 6.1 fails on them
    size_t bad_calls = 0;      // perf 6.1's loop breaks when a record needs a second call after output
    size_t max_per_record = 0;
    bool error = false;
};

// Walks the output buffer: COMPRESSED records decompressed (one stream), padding skipped.
Decoded decode(const std::byte* p, size_t len) {
    Decoded d;
    ZSTD_DStream* ds = ZSTD_createDStream();
    ZSTD_initDStream(ds);
    std::vector<std::byte> out(4u << 20);
    for (size_t at = 0; at < len;) {
        perf_event_header h;
        std::memcpy(&h, p + at, sizeof h);
        REQUIRE(h.size >= 8);
        REQUIRE(at + h.size <= len);
        if (h.type == 81) {
            ++d.records;
            ZSTD_inBuffer in{p + at + 8, size_t(h.size - 8), 0};
            size_t produced = 0, calls = 0;
            while (in.pos < in.size) {
                ZSTD_outBuffer o{out.data(), out.size(), 0};
                const size_t r = ZSTD_decompressStream(ds, &o, &in);
                if (ZSTD_isError(r)) {
                    d.error = true;
                    break;
                }
                if (calls++ > 0 && produced > 0) ++d.bad_calls;
                produced += o.pos;
                d.bytes.insert(d.bytes.end(), out.data(), out.data() + o.pos);
            }
            if (produced == 0) ++d.empty_records;
            d.max_per_record = std::max(d.max_per_record, produced);
        } else {
            REQUIRE(h.type == kRecordPadding);
        }
        at += h.size;
    }
    ZSTD_freeDStream(ds);
    return d;
}

void check_round_trip(const std::vector<std::vector<std::byte>>& inputs, size_t buffer) {
    StagingPool out((ZstdEncoder::max_output(buffer) + 4095) / 4096 * 4096, 8);
    ZstdEncoder enc(1, buffer);
    std::vector<std::byte> want;
    for (const auto& in : inputs) {
        REQUIRE(enc.encode(in, out));
        want.insert(want.end(), in.begin(), in.end());
    }
    out.pad_to_alignment();
    std::vector<std::byte> stream;
    while (out.has_ready()) {
        const auto b = out.pop_ready();
        stream.insert(stream.end(), b.data, b.data + b.len);
        out.release(b.index);
    }
    if (auto p = out.take_partial()) {
        CHECK(p->len % 4096 == 0);
        stream.insert(stream.end(), p->data, p->data + p->len);
    }
    const Decoded d = decode(stream.data(), stream.size());
    CHECK_FALSE(d.error);
    CHECK(d.empty_records == 0);
    CHECK(d.bad_calls == 0);
    CHECK(d.max_per_record <= buffer);
    REQUIRE(d.bytes.size() == want.size());
    CHECK(std::memcmp(d.bytes.data(), want.data(), want.size()) == 0);
    CHECK(enc.stats().bytes_in == want.size());
    CHECK(enc.stats().records == d.records);
}

}  // namespace

TEST_CASE("encoder: compressible buffers decode with libzstd to the same bytes", "[encode]") {
    const size_t buffer = 1u << 20;
    std::vector<std::vector<std::byte>> in;
    for (uint32_t k = 0; k < 5; ++k) in.push_back(make_records(buffer, 8240, false, k));
    in.push_back(make_records(4096 + 40, 40, false));  // a small partial buffer (a round's flush)
    check_round_trip(in, buffer);
    StagingPool out((ZstdEncoder::max_output(buffer) + 4095) / 4096 * 4096, 4);
    ZstdEncoder enc(1, buffer);
    REQUIRE(enc.encode(in[0], out));
    CHECK(enc.stats().bytes_out * 10 < enc.stats().bytes_in);
    CHECK(enc.stats().chunked == 0);
}

TEST_CASE("encoder: random data is cut one block per record, each under 64 KiB", "[encode]") {
    const size_t buffer = 1u << 20;
    std::vector<std::vector<std::byte>> in;
    for (uint32_t k = 0; k < 3; ++k) in.push_back(make_records(buffer, 8240, true, k));
    in.push_back(make_records(buffer, 8240, false, 9));  // and back to compressible data
    check_round_trip(in, buffer);
}

TEST_CASE("encoder: each buffer's records end 8-byte aligned (padding stays whole records)", "[encode]") {
    const size_t buffer = 256u << 10;
    StagingPool out((ZstdEncoder::max_output(buffer) + 4095) / 4096 * 4096, 8);
    ZstdEncoder enc(1, buffer);
    std::vector<std::vector<std::byte>> all;
    for (size_t n : {8u, 24u, 48u, 200u, 4104u, 65528u}) {
        all.push_back(make_records(buffer, n, n % 3 == 0));
        REQUIRE(enc.encode(all.back(), out));
        CHECK(out.current_fill() % 8 == 0);
    }
    check_round_trip(all, buffer);
}

TEST_CASE("encoder: with no output buffer free it refuses, writing nothing", "[encode]") {
    const size_t buffer = 128u << 10;
    const size_t out_bytes = (ZstdEncoder::max_output(buffer) + 4095) / 4096 * 4096;
    StagingPool out(out_bytes, 2);
    ZstdEncoder enc(1, buffer);
    const auto random = make_records(buffer, 8240, true);
    // Incompressible: each buffer takes nearly a whole output buffer.
    REQUIRE(enc.encode(random, out));
    REQUIRE(enc.encode(random, out));
    CHECK_FALSE(enc.encode(random, out));
    CHECK(enc.stats().frames == 2);
    const auto b = out.pop_ready();
    out.release(b.index);
    CHECK(enc.encode(random, out));
}
