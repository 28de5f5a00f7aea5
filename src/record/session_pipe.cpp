// The record session's pipe mode (-o -): the output it builds, and the ids of events reopened while
// recording, which perf must learn from the stream itself before their first record.
#include <map>

#include "ringcap/records.hpp"
#include "session.hpp"

namespace ringcap {

std::unique_ptr<RecordOutput> Session::make_pipe_output(size_t staging_buffer_bytes,
                                                         const std::vector<perf_event_attr>& attrs) {
    std::vector<AttrEntry> entries = attr_entries(attrs);
    std::vector<std::pair<std::string, std::string>> tracepoints;
    for (const auto& sp : specs_)
        if (sp.type == PERF_TYPE_TRACEPOINT) tracepoints.emplace_back(sp.tp_system, sp.tp_event);
    const std::vector<std::byte> tracing =
        tracepoints.empty() ? std::vector<std::byte>{} : build_tracing_data(tracefs_root(), tracepoints);
    // perf reads HEADER_COMPRESSED before the first COMPRESSED record: it sizes its decompression
    // buffer with mmap_len. The ratio is not known yet (perf writes it at the start in pipe mode too).
    CompressionFeature comp;
    comp.level = uint32_t(opts_.compression_level);
    comp.mmap_len = uint32_t(staging_buffer_bytes);
    std::vector<unsigned> left_out;
    std::vector<std::byte> head;
    try {
        head = build_pipe_head(entries, HostInfo::current(opts_.argv), tracing,
                               opts_.compression_level > 0 ? &comp : nullptr, &left_out);
    } catch (const std::length_error& e) {
        throw Error(std::string("-o -: ") + e.what() + "; record to a file instead", 2);
    }
    for (unsigned bit : left_out)
        log_ << "ringcap: pipe: header feature " << bit << " is too big for a pipe record and is left out\n";
    auto out = std::make_unique<PipeOutput>(pipe_fd_, std::move(entries), std::move(head), signals_.fd(), log_,
                                            opts_.pipe_backlog);
    if (opts_.verbose)
        log_ << "ringcap: pipe mode: perf's pipe format on stdout, data staged in a memfd; the record stops when "
                "more than "
             << human_bytes(out->stats().cap) << " wait for the reader\n";
    return out;
}

void Session::announce_ids(size_t ring) {
    if (pipe_fd_ < 0) return;
    // perf 6.1 has no record that adds ids to a known event: each HEADER_ATTR is an event of its own
    // (listed once more by perf report, with the same attr and name). Written at a reserved offset
    // before the collector adopts the ring, so every record with these ids comes after it.
    const auto& known = static_cast<const PipeOutput&>(*output_).attrs();
    std::map<size_t, AttrEntry> events;
    for (const auto& ev : source_->rings()[ring].events) {
        AttrEntry& e = events[ev.event_index];
        e.attr = known.at(ev.event_index).attr;
        e.name = known.at(ev.event_index).name;
        e.ids.push_back(ev.id);
    }
    std::vector<std::byte> records;
    for (const auto& [index, e] : events) {
        const auto rec = build_header_attr(e);
        records.insert(records.end(), rec.begin(), rec.end());
    }
    if (!records.empty()) write_records(records);
}

}  // namespace ringcap
