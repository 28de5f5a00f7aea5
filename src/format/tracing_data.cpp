// HEADER_TRACING_DATA: the event formats perf script needs to decode tracepoint fields. Layout of
// perf's trace-event-info.c, version 0.5 (perf reads it; 0.6 only adds saved_cmdlines):
//   "\x17\x08\x44tracing" "0.5\0" u8 big_endian u8 sizeof(long) u32 page_size
//   "header_page\0" u64 size data   "header_event\0" u64 size data
//   u32 n_ftrace_formats (0)
//   u32 n_systems, per system: name\0 u32 n_events, per event: u64 size, format file
//   u32 kallsyms size (0)   u32 printk_formats size (0)
#include <cstring>
#include <map>
#include <set>
#include <unistd.h>

#include "ringcap/perf_data.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

std::vector<std::byte> build_tracing_data(const std::string& tracefs,
                                          const std::vector<std::pair<std::string, std::string>>& tracepoints) {
    std::vector<std::byte> out;
    // Room ahead (format files are a few KiB each). Also keeps GCC 12's -O2 stringop-overflow false
    // positive away from the first insert into an empty vector.
    out.reserve(size_t(64) << 10);
    auto raw = [&](const void* p, size_t n) {
        auto* b = static_cast<const std::byte*>(p);
        out.insert(out.end(), b, b + n);
    };
    auto u32 = [&](uint32_t v) { raw(&v, 4); };
    auto u64 = [&](uint64_t v) { raw(&v, 8); };
    auto file = [&](const std::string& path) {
        // tracefs files report size 0 to stat: read them whole.
        auto text = read_text_file(path);
        if (!text) throw Error("cannot read " + path + " for the tracing data");
        u64(text->size());
        raw(text->data(), text->size());
    };

    const unsigned char magic[10] = {23, 8, 68, 't', 'r', 'a', 'c', 'i', 'n', 'g'};
    raw(magic, sizeof magic);
    raw("0.5", 4);
    const uint8_t big_endian = 0, long_size = sizeof(long);
    raw(&big_endian, 1);
    raw(&long_size, 1);
    u32(uint32_t(page_size()));
    raw("header_page", 12);
    file(tracefs + "/events/header_page");
    raw("header_event", 13);
    file(tracefs + "/events/header_event");
    u32(0);  // ftrace's own formats: only needed for ftrace:* events

    std::map<std::string, std::set<std::string>> systems;
    for (const auto& [sys, ev] : tracepoints) systems[sys].insert(ev);
    u32(uint32_t(systems.size()));
    for (const auto& [sys, events] : systems) {
        raw(sys.c_str(), sys.size() + 1);
        u32(uint32_t(events.size()));
        for (const auto& ev : events) file(tracefs + "/events/" + sys + "/" + ev + "/format");
    }
    u32(0);  // kallsyms: perf report reads /proc/kallsyms itself
    u32(0);  // printk formats
    return out;
}

}  // namespace ringcap
