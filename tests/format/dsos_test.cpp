// Which DSOs BUILD_ID covers: sample pages resolved against every process's mappings, in any order
// of hand-over, and every file once a table overflows.
#include <catch2/catch.hpp>

#include "ringcap/dsos.hpp"

using namespace ringcap;

namespace {
MappedFile map(uint32_t pid, uint64_t start, uint64_t end, const std::string& path, uint64_t ino) {
    return {pid, start, end, 8, 1, ino, true, path};
}
std::vector<std::string> paths(const std::vector<DsoRef>& v) {
    std::vector<std::string> out;
    for (const auto& d : v) out.push_back(d.path);
    return out;
}
}  // namespace

TEST_CASE("SampleHits keeps one entry per (pid, page) and gives them back", "[format][dsos]") {
    SampleHits h(4);  // 16 slots, 12 usable
    h.add(7, 0x401000);
    h.add(7, 0x401fff);  // same page
    h.add(8, 0x401000);  // another process
    CHECK(h.size() == 2);
    std::vector<std::pair<uint32_t, uint64_t>> got;
    h.take([&](uint32_t pid, uint64_t page) { got.emplace_back(pid, page); });
    CHECK(got.size() == 2);
    for (const auto& [pid, page] : got) CHECK(page == 0x401000);
    CHECK(h.size() == 0);
    for (uint64_t p = 0; p < 13; ++p) h.add(1, p << 12);
    CHECK(h.size() == 12);
    CHECK(h.overflowed());
}

TEST_CASE("DsoRegistry: only the files that samples hit, per process, in any hand-over order", "[format][dsos]") {
    DsoRegistry r;
    // Two processes map different files at the same address; a library both map.
    r.add_mappings(std::vector<MappedFile>{map(10, 0x400000, 0x402000, "/bin/a", 1), map(20, 0x400000, 0x402000, "/bin/b", 2),
                                           map(10, 0x7f0000, 0x7f4000, "/lib/libc.so", 3),
                                           map(20, 0x7e0000, 0x7e4000, "/lib/libc.so", 3),
                                           map(10, 0x900000, 0x901000, "//anon", 0)});
    SampleHits h;
    h.add(10, 0x400100);  // /bin/a, not /bin/b
    h.add(10, 0x900010);  // anonymous code: resolves, lists nothing
    r.add_hits(h);
    CHECK(paths(r.dsos(false)) == std::vector<std::string>{"/bin/a"});
    CHECK(paths(r.dsos(true)) == std::vector<std::string>{"/bin/a", "/bin/b", "/lib/libc.so"});

    // A page whose mapping another collector hands over later waits for it.
    h.add(30, 0x500000);
    r.add_hits(h);
    CHECK(paths(r.dsos(false)) == std::vector<std::string>{"/bin/a"});
    r.add_mappings(std::vector<MappedFile>{map(30, 0x500000, 0x501000, "/bin/c", 4)});
    CHECK(paths(r.dsos(false)) == std::vector<std::string>{"/bin/a", "/bin/c"});
    const auto st = r.stats();
    CHECK(st.files == 4);
    CHECK(st.hit == 2);
    CHECK_FALSE(st.all_hit);
    // The newest mapping of a file is kept, for /proc/PID/map_files.
    for (const auto& d : r.dsos(true))
        if (d.path == "/lib/libc.so") CHECK(d.pid == 20);

    // A page no mapping ever covers is given up on after a few hand-overs.
    h.add(40, 0x1000);
    for (int i = 0; i < 6; ++i) r.add_hits(h);
    CHECK(r.stats().unresolved_pages == 1);
}

TEST_CASE("DsoRegistry: an overflowed table counts every file as hit", "[format][dsos]") {
    DsoRegistry r;
    r.add_mappings(std::vector<MappedFile>{map(1, 0x1000, 0x2000, "/bin/x", 1), map(1, 0x3000, 0x4000, "/bin/y", 2)});
    SampleHits h(2);
    for (uint64_t p = 0; p < 8; ++p) h.add(1, 0x100000 + (p << 12));
    REQUIRE(h.overflowed());
    r.add_hits(h);
    CHECK(r.stats().all_hit);
    CHECK(paths(r.dsos(false)) == std::vector<std::string>{"/bin/x", "/bin/y"});
}

TEST_CASE("DsoRegistry: an exited process's mappings go after a grace, a new one with its pid keeps its own",
          "[format][dsos]") {
    DsoRegistry r;
    const auto t0 = DsoRegistry::Clock::now();
    r.add_mappings(std::vector<MappedFile>{map(5, 0x400000, 0x401000, "/bin/old", 1)});
    r.add_exits(std::vector<uint32_t>{5}, t0);
    // The pid is reused at once; another collector hands over a page of the old process late.
    r.add_mappings(std::vector<MappedFile>{map(5, 0x600000, 0x601000, "/bin/new", 2)});
    SampleHits h;
    h.add(5, 0x400800);
    r.add_hits(h, t0 + std::chrono::seconds(1));  // within the grace: still resolves
    CHECK(paths(r.dsos(false)) == std::vector<std::string>{"/bin/old"});
    r.add_hits(h, t0 + DsoRegistry::kExitGrace + std::chrono::seconds(1));  // the old mappings are gone now
    h.add(5, 0x600010);  // the new process's page still resolves
    h.add(5, 0x400800);  // the old one no longer does
    r.add_hits(h, t0 + DsoRegistry::kExitGrace + std::chrono::seconds(2));
    CHECK(paths(r.dsos(false)) == std::vector<std::string>{"/bin/new", "/bin/old"});
    CHECK(r.stats().unresolved_pages == 1);
    // Start records naming the same mappings again (each rotated file) are kept once.
    for (int i = 0; i < 3; ++i) r.add_mappings(std::vector<MappedFile>{map(9, 0x1000, 0x2000, "/bin/x", 3)});
    CHECK(r.stats().files == 3);
}
