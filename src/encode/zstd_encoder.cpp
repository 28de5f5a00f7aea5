#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_frameHeaderSize (exported by Debian's libzstd)
#include "ringcap/encoder.hpp"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <zstd.h>

#include "ringcap/records.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

namespace {

// The fallback's input per record: one zstd block (< 128 KiB) whose worst case, stored raw, plus a
// frame header still fits in one record.
constexpr size_t kChunk = 60000;
// Room kept in every record for an empty last block (3 bytes) and the alignment frame (<= 15 bytes).
constexpr size_t kRecordLimit = kMaxCompressedPayload - 16 - 3;
constexpr uint32_t kSkippableMagic = 0x184D2A50;

uint64_t thread_cpu_ns() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void put_header(std::byte* p, size_t payload) {
    const perf_event_header h{kRecordCompressed, 0, uint16_t(8 + payload)};
    std::memcpy(p, &h, sizeof h);
}

}  // namespace

struct ZstdEncoder::Ctx {
    ZSTD_CCtx* cctx = nullptr;
    ~Ctx() { ZSTD_freeCCtx(cctx); }
};

ZstdEncoder::ZstdEncoder(int level, size_t max_input)
    : ctx_(std::make_unique<Ctx>()), max_input_(max_input) {
    level_ = level;
    ctx_->cctx = ZSTD_createCCtx();
    if (!ctx_->cctx) throw Error("zstd: cannot create a compression context");
    const size_t r = ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_compressionLevel, level);
    if (ZSTD_isError(r)) throw Error(std::string("zstd: level ") + std::to_string(level) + ": " + ZSTD_getErrorName(r));
    ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_checksumFlag, 0);  // blocks end the frame: records split there
    frame_cap_ = ZSTD_compressBound(max_input);
    frame_ = std::make_unique<std::byte[]>(frame_cap_);
    records_ = std::make_unique<std::byte[]>(records_area(max_input));
    // Every allocation zstd makes for this level happens now, not while recording.
    std::byte probe[64] = {};
    compress({probe, sizeof probe}, records_.get());
    stats_ = EncoderStats{};
}

ZstdEncoder::~ZstdEncoder() = default;

size_t ZstdEncoder::max_output(size_t input) {
    // One-shot: the frame (<= compressBound) in records that each hold more than half a record's
    // room, or chunks of kChunk with a header each; the alignment frame at the end.
    return ZSTD_compressBound(input) + 16 * (input / 32768 + 4) + 64;
}

size_t ZstdEncoder::context_bytes(int level, size_t max_input) {
    return ZSTD_estimateCCtxSize_usingCParams(ZSTD_getCParams(level, max_input, 0)) + ZSTD_compressBound(max_input);
}

size_t ZstdEncoder::finish_records(size_t end) {
    // Records stay 8-byte aligned (the output buffers pad with whole records): a skippable zstd frame
    // of 9..15 bytes at the start of the first record makes up the difference. At the start, not at
    // the end: perf 6.1's decompression loop mishandles input left over after a frame ended (it
    // shrinks its output buffer twice), so a record must end where its frame's data ends.
    const size_t len = end - kLead, pad = (8 - len % 8) % 8;
    if (pad == 0) {
        start_ = kLead;
        return len;
    }
    perf_event_header h;
    std::memcpy(&h, area_ + kLead, sizeof h);
    h.size = uint16_t(h.size + 8 + pad);
    start_ = kLead - 8 - pad;
    std::byte* p = area_ + start_;
    std::memcpy(p, &h, sizeof h);
    const uint32_t magic = kSkippableMagic, size = uint32_t(pad);
    std::memcpy(p + 8, &magic, 4);
    std::memcpy(p + 12, &size, 4);
    std::memset(p + 16, 0, pad);
    return len + 8 + pad;
}

size_t ZstdEncoder::frame_to_records(size_t n) {
    // Cuts the frame between blocks (RFC 8878: 3-byte block headers), at most kRecordLimit bytes per
    // record. 0 when a block (with the frame header) does not fit in one record.
    const std::byte* f = frame_.get();
    const size_t fh = ZSTD_frameHeaderSize(f, n);
    if (ZSTD_isError(fh)) return 0;
    size_t out = kLead, begin = 0, pos = fh;
    auto emit = [&](size_t end) {
        ++frame_records_;
        put_header(area_ + out, end - begin);
        std::memcpy(area_ + out + 8, f + begin, end - begin);
        out += 8 + end - begin;
        begin = end;
    };
    for (bool last = false; !last;) {
        if (pos + 3 > n) return 0;
        const uint32_t bh = uint32_t(f[pos]) | uint32_t(f[pos + 1]) << 8 | uint32_t(f[pos + 2]) << 16;
        last = bh & 1;
        const uint32_t type = (bh >> 1) & 3, size = bh >> 3;
        if (type == 3) return 0;
        const size_t end = pos + 3 + (type == 1 ? 1 : size);
        if (end > n) return 0;
        // An empty block always joins the record before it (alone it would decompress to nothing).
        if (end - begin > kRecordLimit && !(type == 0 && size == 0)) {
            if (pos == begin) return 0;
            emit(pos);
            if (end - begin > kRecordLimit) return 0;
        }
        pos = end;
    }
    if (pos != n) return 0;
    emit(n);
    return finish_records(out);
}

size_t ZstdEncoder::chunked_records(std::span<const std::byte> in) {
    // Poorly compressible data: one block per record, flushed at every chunk (slower, rarer).
    ZSTD_CCtx_reset(ctx_->cctx, ZSTD_reset_session_only);
    ZSTD_inBuffer ib{in.data(), 0, 0};
    size_t out = kLead;
    for (size_t p = 0; p < in.size(); p += kChunk) {
        ib.size = std::min(in.size(), p + kChunk);
        const bool last = ib.size == in.size();
        std::byte* rec = area_ + out;
        ZSTD_outBuffer ob{rec + 8, kRecordLimit, 0};
        const size_t r = ZSTD_compressStream2(ctx_->cctx, &ob, &ib, last ? ZSTD_e_end : ZSTD_e_flush);
        if (ZSTD_isError(r)) throw Error(std::string("zstd: ") + ZSTD_getErrorName(r));
        if (r != 0) throw Error("zstd: a chunk did not fit in one record");
        put_header(rec, ob.pos);
        ++frame_records_;
        out += 8 + ob.pos;
    }
    return finish_records(out);
}

void ZstdEncoder::set_level(int level) {
    if (level == level_) return;
    // A faster level needs no more memory than the one the context was sized for.
    if (!ZSTD_isError(ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_compressionLevel, level))) level_ = level;
}

std::span<const std::byte> ZstdEncoder::compress(std::span<const std::byte> in, std::byte* area) {
    if (in.size() > max_input_) throw Error("zstd: input larger than the encoder was sized for");
    area_ = area;
    const uint64_t t0 = thread_cpu_ns();
    frame_records_ = 0;
    size_t len = 0;
    if (prefer_chunked_ == 0) {
        const size_t n = ZSTD_compress2(ctx_->cctx, frame_.get(), frame_cap_, in.data(), in.size());
        if (ZSTD_isError(n)) throw Error(std::string("zstd: ") + ZSTD_getErrorName(n));
        len = frame_to_records(n);
    } else {
        --prefer_chunked_;
    }
    if (len == 0) {
        frame_records_ = 0;  // the one-shot's, if it was tried
        len = chunked_records(in);
        ++stats_.chunked;
        if (prefer_chunked_ == 0) prefer_chunked_ = 16;  // the data does not compress: skip the one-shot try for a while
    }
    const std::span<const std::byte> records{area + start_, len};
    ++stats_.frames;
    stats_.bytes_in += in.size();
    stats_.bytes_out += len;
    stats_.records += frame_records_;
    stats_.cpu_ns += thread_cpu_ns() - t0;
    return records;
}

bool ZstdEncoder::place(std::span<const std::byte> records, StagingPool& out) {
    auto w = out.writable();
    if (w.size() < records.size()) {
        if (out.free_count() == 0) return false;
        out.pad_current();
        w = out.writable();
    }
    std::memcpy(w.data(), records.data(), records.size());
    out.commit(records.size());
    return true;
}

bool ZstdEncoder::encode(std::span<const std::byte> in, StagingPool& out) {
    if (in.empty()) return true;
    // Room for the worst case first, so that nothing is compressed for nothing.
    const auto w = out.writable();
    if (w.size() < max_output(in.size()) && out.free_count() == 0) return false;
    return place(compress(in, records_.get()), out);
}

}  // namespace ringcap
