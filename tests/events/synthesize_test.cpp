// The /proc synthesis on crafted maps files: whole lines only, so a long path cannot forge a mapping;
// the records of BPF programs loaded at the start.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <linux/bpf.h>
#include <stddef.h>

#include "ringcap/records.hpp"
#include "ringcap/synthesize.hpp"
#include "tools.hpp"

using namespace ringcap;

namespace {
// The names of the MMAP2 records synthesize_maps() makes of `text`.
std::vector<std::string> mapped_names(const std::string& text) {
    TempFile maps("maps");
    { std::ofstream(maps.path, std::ios::binary) << text; }
    std::vector<std::string> names;
    SynthesisStats stats;
    synthesize_maps(
        [&](const void* rec, size_t n) {
            perf_event_header h;
            std::memcpy(&h, rec, sizeof h);
            REQUIRE(h.size == n);
            REQUIRE(h.type == PERF_RECORD_MMAP2);
            names.emplace_back(static_cast<const char*>(rec) + field::kMmap2Filename);
        },
        8, 42, maps.path, false, false, stats);
    return names;
}
}  // namespace

TEST_CASE("maps: a path longer than any line buffer stays one line and names no other file", "[events][security]") {
    // What a process can make its own maps say: a path whose tail looks like a second maps line,
    // placed where a 4,352-byte fgets() buffer (4,351 characters) would cut the line.
    const std::string forged = "7f0000000000-7f0000001000 r-xp 00000000 00:00 0 /etc/shadow";
    const std::string head = "7f1000000000-7f1000001000 r-xp 00000000 08:01 1234 ";
    const std::string path = "/home/u/" + std::string(4351 - head.size() - 9, 'x') + "/" + forged;
    REQUIRE(head.size() + path.size() - forged.size() == 4351);
    const std::string line = head + path + "\n";
    const auto names = mapped_names("55d000000000-55d000001000 r-xp 00000000 08:01 99 /usr/bin/prog\n" + line);
    REQUIRE(names.size() == 2);
    CHECK(names[0] == "/usr/bin/prog");
    CHECK(names[1] == "//toolong");  // as the kernel names a path past PATH_MAX

    // A shorter one is kept whole.
    std::string ok = "/home/u/" + std::string(3000, 'x');
    CHECK(mapped_names("7f1000000000-7f1000001000 r-xp 00000000 08:01 1234 " + ok + "\n") ==
          std::vector<std::string>{ok});
}

TEST_CASE("maps: a last line without its newline (cut short) is left out", "[events][security]") {
    const auto names = mapped_names(
        "55d000000000-55d000001000 r-xp 00000000 08:01 99 /usr/bin/prog\n"
        "7f1000000000-7f1000001000 r-xp 00000000 08:01 1234 /usr/lib/libc.so.6");
    CHECK(names == std::vector<std::string>{"/usr/bin/prog"});
}

TEST_CASE("BPF programs at the start: a KSYMBOL per function and a BPF_EVENT, named as perf names them",
          "[events][bpf]") {
    // A program as read_bpf_info() keeps it (perf_bpil: {info_len, data_len, arrays}, the info, data)
    // whose one function is at an address /proc/kallsyms does not list: perf's own name for it.
    std::vector<std::byte> data(24);
    const uint64_t addr = 0x1234;
    const uint32_t len = 20;
    const uint8_t tag[8] = {0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3};
    std::memcpy(data.data(), &addr, 8);      // jited_ksyms at 0
    std::memcpy(data.data() + 8, &len, 4);   // jited_func_lens at 8
    std::memcpy(data.data() + 16, tag, 8);   // prog_tags at 16
    std::vector<std::byte> info(kPerfBpfProgInfoLen);
    auto put = [&](size_t off, auto v) { std::memcpy(info.data() + off, &v, sizeof v); };
    put(offsetof(bpf_prog_info, id), uint32_t(42));
    std::memcpy(info.data() + offsetof(bpf_prog_info, tag), tag, 8);
    std::memcpy(info.data() + offsetof(bpf_prog_info, name), "myprog", 7);
    put(offsetof(bpf_prog_info, nr_jited_ksyms), uint32_t(1));
    put(offsetof(bpf_prog_info, nr_jited_func_lens), uint32_t(1));
    put(offsetof(bpf_prog_info, nr_prog_tags), uint32_t(1));
    put(offsetof(bpf_prog_info, jited_ksyms), uint64_t(0));
    put(offsetof(bpf_prog_info, jited_func_lens), uint64_t(8));
    put(offsetof(bpf_prog_info, prog_tags), uint64_t(16));
    std::vector<std::byte> prog(16);
    const uint32_t head[2] = {kPerfBpfProgInfoLen, uint32_t(data.size())};
    std::memcpy(prog.data(), head, 8);
    std::memcpy(prog.data() + 8, &kPerfBpilArrays, 8);
    prog.insert(prog.end(), info.begin(), info.end());
    prog.insert(prog.end(), data.begin(), data.end());
    BpfInfo bpf;
    bpf.programs[42] = prog;

    std::vector<std::vector<std::byte>> recs;
    SynthesisStats stats;
    const RecordSink sink = [&](const void* r, size_t n) {
        const auto* b = static_cast<const std::byte*>(r);
        recs.emplace_back(b, b + n);
    };
    synthesize_bpf(sink, 8, bpf, stats);
    REQUIRE(recs.size() == 2);
    perf_event_header h;
    std::memcpy(&h, recs[0].data(), sizeof h);
    CHECK(h.type == PERF_RECORD_KSYMBOL);
    CHECK(h.size == recs[0].size());
    CHECK(h.size % 8 == 0);
    uint64_t a;
    uint32_t l;
    uint16_t type;
    std::memcpy(&a, recs[0].data() + 8, 8);
    std::memcpy(&l, recs[0].data() + 16, 4);
    std::memcpy(&type, recs[0].data() + 20, 2);
    CHECK(a == addr);
    CHECK(l == len);
    CHECK(type == PERF_RECORD_KSYMBOL_TYPE_BPF);
    CHECK(std::string(reinterpret_cast<const char*>(recs[0].data() + 24)) == "bpf_prog_deadbeef00010203_myprog");
    std::memcpy(&h, recs[1].data(), sizeof h);
    CHECK(h.type == PERF_RECORD_BPF_EVENT);
    CHECK(h.size == 8 + 16 + 8);  // header, type/flags/id, tag, then the sample_id
    uint16_t event;
    uint32_t id;
    std::memcpy(&event, recs[1].data() + 8, 2);
    std::memcpy(&id, recs[1].data() + 12, 4);
    CHECK(event == PERF_BPF_EVENT_PROG_LOAD);
    CHECK(id == 42);
    CHECK(std::memcmp(recs[1].data() + 16, tag, 8) == 0);
}
