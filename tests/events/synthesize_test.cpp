// The /proc synthesis on crafted maps files: whole lines only, so a long path cannot forge a mapping.
#include <catch2/catch.hpp>

#include <fstream>

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
