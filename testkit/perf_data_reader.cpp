#include "testkit/perf_data_reader.hpp"

#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <zstd.h>

namespace ringcap {

namespace {

template <typename T>
bool get(const std::vector<char>& buf, uint64_t off, T& out) {
    if (off > buf.size() || buf.size() - off < sizeof(T)) return false;
    std::memcpy(&out, buf.data() + off, sizeof(T));
    return true;
}

}  // namespace

std::optional<PerfDataFile> read_perf_data(const std::string& path, std::string* error) {
    auto fail = [&](const std::string& why) -> std::optional<PerfDataFile> {
        if (error) *error = path + ": " + why;
        return std::nullopt;
    };
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return fail("cannot open");
    // One read of the whole file: a byte-wise istreambuf_iterator took minutes on a 600 MB file
    // under AddressSanitizer.
    std::vector<char> buf(size_t(in.tellg()));
    in.seekg(0);
    if (!in.read(buf.data(), std::streamsize(buf.size()))) return fail("cannot read");

    PerfDataFile f;
    if (!get(buf, 0, f.header) || std::memcmp(f.header.magic, "PERFILE2", 8) != 0) return fail("not a perf.data file");
    const uint64_t attr_size = f.header.attr_size;
    if (attr_size < sizeof(PerfFileSection) + 64) return fail("bad attr_size");
    const uint64_t nattrs = f.header.attrs.size / attr_size;
    for (uint64_t i = 0; i < nattrs; ++i) {
        AttrEntry a;
        const uint64_t off = f.header.attrs.offset + i * attr_size;
        const uint64_t asz = attr_size - sizeof(PerfFileSection);
        if (off + attr_size > buf.size()) return fail("attrs section out of bounds");
        std::memcpy(&a.attr, buf.data() + off, std::min<uint64_t>(asz, sizeof(perf_event_attr)));
        PerfFileSection ids{};
        get(buf, off + asz, ids);
        for (uint64_t k = 0; k < ids.size / 8; ++k) {
            uint64_t id = 0;
            if (!get(buf, ids.offset + k * 8, id)) return fail("ids out of bounds");
            a.ids.push_back(id);
        }
        f.attrs.push_back(std::move(a));
    }

    // Feature sections: one {offset,size} per set bit, in bit order, right after the data.
    uint64_t feat = f.header.data.offset + f.header.data.size;
    for (unsigned bit = 0; bit < 256; ++bit) {
        if (!(f.header.features[bit / 64] & (1ull << (bit % 64)))) continue;
        PerfFileSection sec{};
        if (!get(buf, feat, sec)) break;
        feat += sizeof sec;
        if (bit != kFeatEventDesc) continue;
        uint32_t nr = 0, asz = 0;
        uint64_t p = sec.offset;
        get(buf, p, nr);
        get(buf, p + 4, asz);
        p += 8;
        for (uint32_t e = 0; e < nr && e < f.attrs.size(); ++e) {
            p += asz;
            uint32_t nids = 0, len = 0;
            get(buf, p, nids);
            get(buf, p + 4, len);
            if (p + 8 + len > buf.size()) break;
            f.attrs[e].name = std::string(buf.data() + p + 8, strnlen(buf.data() + p + 8, len));
            p += 8 + len + uint64_t(nids) * 8;
        }
    }

    // Walk the data section.
    FileCounts& c = f.counts;
    c.samples_per_attr.assign(f.attrs.size(), 0);
    uint64_t p = f.header.data.offset;
    const uint64_t end = f.header.data.offset + f.header.data.size;
    if (end > buf.size()) return fail("data section beyond the end of the file");
    // COMPRESSED records (-z) are decompressed as perf does: one stream for the file, and records
    // may continue from one COMPRESSED record into the next.
    std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> dstream(nullptr, ZSTD_freeDStream);
    std::vector<char> inner;  // decompressed bytes not yet walked (a partial record)
    auto count = [&](const std::vector<char>& b, uint64_t at, const perf_event_header& h) {
        ++c.records;
        ++c.by_type[h.type];
        uint64_t v = 0;
        switch (h.type) {
            case PERF_RECORD_SAMPLE: {
                ++c.samples;
                get(b, at + field::kSampleIdentifier, v);
                ++c.samples_per_id[v];
                bool found = false;
                for (size_t i = 0; i < f.attrs.size() && !found; ++i)
                    for (uint64_t id : f.attrs[i].ids)
                        if (id == v) {
                            ++c.samples_per_attr[i];
                            found = true;
                            break;
                        }
                if (!found) ++c.unknown_ids;
                break;
            }
            case PERF_RECORD_LOST:
                ++c.lost_records;
                if (get(b, at + field::kLostCount, v)) c.lost += v;
                break;
            case PERF_RECORD_LOST_SAMPLES:
                if (get(b, at + field::kLostSamplesCount, v)) c.lost_samples += v;
                break;
            case kRecordFinishedRound:
                ++c.finished_rounds;
                break;
            default:
                break;
        }
    };
    auto decompress = [&](uint64_t at, size_t len) {
        if (!dstream) {
            dstream.reset(ZSTD_createDStream());
            ZSTD_initDStream(dstream.get());
        }
        ++c.compressed_records;
        ZSTD_inBuffer in{buf.data() + at, len, 0};
        std::vector<char> out(1u << 20);
        size_t produced = 0;
        while (in.pos < in.size) {
            ZSTD_outBuffer o{out.data(), out.size(), 0};
            const size_t r = ZSTD_decompressStream(dstream.get(), &o, &in);
            if (ZSTD_isError(r)) {
                c.decompress_errors++;
                return;
            }
            inner.insert(inner.end(), out.data(), out.data() + o.pos);
            produced += o.pos;
        }
        if (produced == 0) c.decompress_errors++;  // perf 6.1 fails on a record that yields nothing
        c.decompressed_bytes += produced;
        uint64_t q = 0;
        perf_event_header h{};
        while (get(inner, q, h) && h.size >= sizeof h && q + h.size <= inner.size()) {
            count(inner, q, h);
            q += h.size;
        }
        inner.erase(inner.begin(), inner.begin() + long(q));
    };
    while (p < end) {
        perf_event_header h{};
        if (end - p < sizeof h || !get(buf, p, h) || h.size < sizeof h || p + h.size > end) {
            c.truncated = true;
            break;
        }
        if (h.type == kRecordCompressed) decompress(p + sizeof h, h.size - sizeof h);
        else count(buf, p, h);
        p += h.size;
    }
    c.compressed_leftover = inner.size();
    return f;
}

}  // namespace ringcap
