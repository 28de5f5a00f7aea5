#include "ringcap/file_output.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <unistd.h>

#include "ringcap/records.hpp"

namespace ringcap {

namespace {
constexpr uint64_t kNoFeatures[4] = {0, 0, 0, 0};

std::vector<std::byte> tracing_payload(const std::vector<EventSpec>& specs) {
    std::vector<std::pair<std::string, std::string>> tracepoints;
    for (const auto& sp : specs)
        if (sp.type == PERF_TYPE_TRACEPOINT) tracepoints.emplace_back(sp.tp_system, sp.tp_event);
    if (tracepoints.empty()) return {};
    return build_tracing_data(tracefs_root(), tracepoints);
}

}  // namespace

FileOutput::FileOutput(const std::string& path, bool allow_direct, std::vector<AttrEntry> attrs, bool own_path)
    : file_(OutputFile::create(path, allow_direct, own_path)), attrs_(std::move(attrs)), data_offset_(data_offset_for(attrs_)) {
    write_head(0);
}

void FileOutput::write_head(uint64_t data_size) {
    const auto head = build_file_head(attrs_, data_offset_, data_size, crash_features_);
    file_.pwrite_all(head.data(), head.size(), 0);
    std::memcpy(first_page_->bytes, head.data(), std::min<size_t>(head.size(), sizeof first_page_->bytes));
}

void FileOutput::publish(uint64_t data_size) {
    write_head(data_size);
    file_.publish();
    published_size_ = data_size;
    published_at_ = std::chrono::steady_clock::now();
}

uint64_t FileOutput::last_record_end(uint64_t from, uint64_t to) const {
    std::vector<std::byte> buf(1u << 20);
    uint64_t pos = from, buf_start = 0, buf_len = 0;  // buf holds [buf_start, buf_start + buf_len)
    while (to - pos >= sizeof(perf_event_header)) {
        if (pos + sizeof(perf_event_header) > buf_start + buf_len) {
            buf_start = pos;
            buf_len = file_.pread_some(buf.data(), size_t(std::min<uint64_t>(buf.size(), to - pos)), data_offset_ + pos);
            if (buf_len < sizeof(perf_event_header)) break;
        }
        perf_event_header h;
        std::memcpy(&h, buf.data() + (pos - buf_start), sizeof h);
        // The kernel's records are 8-byte sized; a COMPRESSED one may end anywhere (only a frame's
        // records together end aligned: encoder.hpp).
        if (h.size < sizeof h || (h.size % 8 != 0 && h.type != kRecordCompressed) || h.size > to - pos) break;
        pos += h.size;
    }
    return pos;
}

void FileOutput::refresh_header(uint64_t durable) {
    if (durable == published_size_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - published_at_ < kHeaderRefresh) return;
    const PerfFileHeader h = make_file_header(attrs_, data_offset_, durable, crash_features_);
    std::memcpy(first_page_->bytes, &h, sizeof h);
    const size_t len = std::min<size_t>(data_offset_, sizeof first_page_->bytes);
    published_at_ = now;  // a failed write or sync is tried again after the interval, not at once
    // Power loss, not only kill -9: the header may name only data on stable storage, the extents
    // it went into included (an O_DIRECT write into a preallocated extent is made "written" in the
    // journal). So the data is synced first; the header itself reaches stable storage with the next
    // sync, and until then the one before it names less. On the main thread only: at 40 kHz dwarf
    // (200 MB/s of O_DIRECT writes) fdatasync took 3 ms median, 20 ms p90, 80 ms at most.
    if (sync_data() != 0) return;
    if (write_block(0, first_page_->bytes, len) != 0) return;  // the final header is written at the end
    published_size_ = durable;
}

int FileOutput::write_block(uint64_t offset, const void* p, size_t len) {
    const bool direct = file_.o_direct() && offset % kStagingAlign == 0 && len % kStagingAlign == 0 &&
                        reinterpret_cast<uintptr_t>(p) % kStagingAlign == 0;
    if (!direct) return pwrite_full(file_.buffered_fd(), p, len, offset);
    const char* b = static_cast<const char*>(p);
    while (len > 0) {
        const ssize_t n = ::pwrite(file_.direct_fd(), b, len, off_t(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return ENOSPC;
        // A short O_DIRECT write that ends off a block boundary: the rest goes through the cache.
        if (n % kStagingAlign != 0) return pwrite_full(file_.buffered_fd(), b + n, len - size_t(n), offset + uint64_t(n));
        b += n;
        len -= size_t(n);
        offset += uint64_t(n);
    }
    return 0;
}

void FileOutput::add_ids(size_t event_index, const std::vector<uint64_t>& ids) {
    auto& list = attrs_.at(event_index).ids;
    list.insert(list.end(), ids.begin(), ids.end());
    // While they fit before the data, rewrite the attrs now, so a file cut short by a crash knows the
    // new ids too; otherwise finish() puts them after the features.
    if (ids_fit(attrs_, data_offset_)) write_head(published_size_);
}

uint64_t FileOutput::tail_bytes(const HostInfo& host, const std::vector<EventSpec>& specs,
                                const std::vector<BuildIdEntry>& build_ids) const {
    const CompressionFeature comp;
    const SampleTimeRange times{1, 1};
    const FeatureBlock feats = build_features(attrs_, host, data_offset_, tracing_payload(specs),
                                              build_build_id_feature(build_ids), &comp, &times);
    return feats.bytes.size() + (ids_fit(attrs_, data_offset_) ? 0 : build_ids_block(attrs_).size());
}

std::string FileOutput::finish(uint64_t data_size, const HostInfo& host, const std::vector<EventSpec>& specs,
                               const std::vector<BuildIdEntry>* build_ids, const CompressionFeature* compression,
                               const SampleTimeRange* sample_time) {
    const uint64_t feat_start = data_offset_ + data_size;
    FeatureBlock feats = build_features(attrs_, host, feat_start, tracing_payload(specs),
                                        build_ids ? build_build_id_feature(*build_ids) : std::vector<std::byte>{}, compression,
                                        sample_time);
    // Cut what a failed write may have left beyond the kept data first: on a full disk that frees
    // the room the feature block needs.
    if (ftruncate(file_.buffered_fd(), off_t(feat_start)) != 0)
        throw Error("truncating '" + file_.path() + "': " + errno_text(errno), 1);
    std::string feature_error;
    try {
        file_.pwrite_all(feats.bytes.data(), feats.bytes.size(), feat_start);
    } catch (const Error& e) {
        // On a full disk even the small feature block may not fit: keep a valid file without it.
        feature_error = e.what();
        feats.bytes.clear();
        std::memcpy(feats.bitmap, kNoFeatures, sizeof kNoFeatures);
    }
    uint64_t ids_at = 0;  // right after the attrs
    if (!ids_fit(attrs_, data_offset_)) {
        // Events opened during the record (a CPU back online) added ids beyond the room before the
        // data: they go after the features.
        ids_at = feat_start + feats.bytes.size();
        const auto ids = build_ids_block(attrs_);
        file_.pwrite_all(ids.data(), ids.size(), ids_at);
    }
    const auto head = build_file_head(attrs_, data_offset_, data_size, feats.bitmap, ids_at);
    file_.pwrite_all(head.data(), head.size(), 0);
    // Once ringcap has exited, the file is on stable storage (perf record leaves that to the kernel).
    if (sync_data() != 0 && errno != EINVAL)  // EINVAL: a file that cannot be synced
        throw Error("cannot write '" + file_.path() + "' to disk: " + errno_text(errno), 1);
    return feature_error;
}

}  // namespace ringcap
