// Encoder: between staging and the writer when -z is on. A full staging buffer (whole records)
// becomes one zstd frame, cut into PERF_RECORD_COMPRESSED records that perf 6.1 reads: at most
// kMaxCompressedPayload bytes each, and every record holds whole zstd blocks, so each one decompresses
// to at least one byte (perf treats an empty result as an error) and to at most the staging buffer.
// The frame's records go into one output buffer, so a file cut at any buffer boundary (a crash, a
// full disk) and buffers of several collectors interleaved in one file both leave complete frames.
// No allocation after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "ringcap/staging.hpp"

namespace ringcap {

inline constexpr size_t kMaxCompressedPayload = 65535 - 8;  // header.size is a u16

struct EncoderStats {
    uint64_t bytes_in = 0;    // staging bytes compressed
    uint64_t bytes_out = 0;   // COMPRESSED records written (headers included)
    uint64_t records = 0;     // COMPRESSED records
    uint64_t frames = 0;      // one per staging buffer
    uint64_t chunked = 0;     // frames that needed the block-per-chunk path (poorly compressible data)
    uint64_t cpu_ns = 0;      // thread CPU time spent compressing
};

class ZstdEncoder {
public:
    // level: zstd's 1..22. max_input: the largest buffer encode() gets (the staging buffer size).
    ZstdEncoder(int level, size_t max_input);
    ~ZstdEncoder();
    ZstdEncoder(const ZstdEncoder&) = delete;
    ZstdEncoder& operator=(const ZstdEncoder&) = delete;

    // The most bytes of records one encode() of `input` bytes appends; output buffers must hold it.
    static size_t max_output(size_t input);
    // The scratch compress() needs for `input` bytes.
    static size_t records_area(size_t input) { return kLead + max_output(input); }
    // What an encoder for `max_input` bytes at `level` allocates besides the caller's areas: zstd's
    // context and the one-shot frame.
    static size_t context_bytes(int level, size_t max_input);

    // Compresses `in` into records built in `area` (records_area() bytes); returns them.
    std::span<const std::byte> compress(std::span<const std::byte> in, std::byte* area);
    // Appends records to `out`: in its current buffer if they fit, else in the next after padding.
    // False, with nothing written, when no buffer is free.
    static bool place(std::span<const std::byte> records, StagingPool& out);

    // Compresses `in` (whole records) into records appended to `out`, all in one of its buffers (the
    // current one if they fit, else the next after padding). False, with nothing written, when `out`
    // may not have room: then its full buffers must be written first.
    bool encode(std::span<const std::byte> in, StagingPool& out);

    const EncoderStats& stats() const { return stats_; }
    // The level of the frames from now on (back-pressure: a faster one). Between frames only.
    void set_level(int level);
    int level() const { return level_; }

private:
    size_t frame_to_records(size_t frame_len);
    size_t chunked_records(std::span<const std::byte> in);
    // The records are built from area_ + kLead on; finish_records() aligns them and sets start_.
    static constexpr size_t kLead = 16;
    size_t finish_records(size_t end);

    struct Ctx;
    std::unique_ptr<Ctx> ctx_;
    int level_ = 0;
    size_t max_input_;
    std::unique_ptr<std::byte[]> frame_;    // the one-shot frame
    size_t frame_cap_;
    std::unique_ptr<std::byte[]> records_;  // encode()'s area
    std::byte* area_ = nullptr;             // compress()'s area
    size_t start_ = kLead;          // where the last compress()'s records begin in area_
    size_t frame_records_ = 0;      // records of the frame being built
    unsigned prefer_chunked_ = 0;  // frames left to compress chunked without trying one-shot
    EncoderStats stats_;
};

}  // namespace ringcap
