// The build-id cache on a temp directory: perf's layout, entries already there, stale files.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include "ringcap/build_id_cache.hpp"
#include "tools.hpp"

using namespace ringcap;

namespace {
std::string hex(const std::vector<uint8_t>& id) {
    std::string s;
    char b[3];
    for (uint8_t v : id) {
        std::snprintf(b, sizeof b, "%02x", v);
        s += b;
    }
    return s;
}
}  // namespace

TEST_CASE("build-id cache: perf's layout, skipped when present, nothing for a changed file", "[format][buildid]") {
    char tmpl[] = "/tmp/ringcap-cache-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    const std::string root = tmpl, dir = root + "/.debug", elf = root + "/prog";
    REQUIRE(run_command(std::string("cp ") + RINGCAP_WORKLOAD + " " + elf).status == 0);
    const auto id = read_build_id(elf);
    if (!id) skip_test("the workload has no build-id (built without --build-id)");
    const std::string sid = hex(*id);

    auto st = add_to_build_id_cache(dir, {{elf, *id, false}});
    CHECK(st.added == 1);
    CHECK(st.error.empty());
    const std::string entry = dir + elf + "/" + sid + "/elf";
    CHECK(read_build_id(entry) == id);
    char target[4096] = {};
    const std::string link = dir + "/.build-id/" + sid.substr(0, 2) + "/" + sid.substr(2);
    REQUIRE(readlink(link.c_str(), target, sizeof target - 1) > 0);
    CHECK(std::string(target) == "../.." + elf + "/" + sid);

    st = add_to_build_id_cache(dir, {{elf, *id, false}});
    CHECK((st.added == 0 && st.present == 1));

    // The file changed on disk since it ran: not cached under the old build-id.
    std::vector<uint8_t> other = *id;
    other[0] ^= 0xff;
    st = add_to_build_id_cache(dir, {{elf, other, false}});
    CHECK((st.added == 0 && st.failed == 1));
    CHECK(st.error.find("caching " + elf) != std::string::npos);

    if (auto vdso = current_vdso()) {
        st = add_to_build_id_cache(dir, {{"[vdso]", vdso->id, false}});
        CHECK(st.added == 1);
        const std::string v = read_file(dir + "/[vdso]/" + hex(vdso->id) + "/vdso");
        CHECK(v.size() == vdso->bytes.size());
        CHECK(v.compare(0, 4, "\x7f" "ELF") == 0);
    }
    CHECK(add_to_build_id_cache("", {{elf, *id, false}}).added == 0);  // no HOME: nothing, no error
    run_command("rm -rf " + root);
}
