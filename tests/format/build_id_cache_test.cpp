// The build-id cache on a temp directory: perf's layout, entries already there, stale files, and
// which cache directories are refused.
#include <catch2/catch.hpp>

#include <iostream>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ringcap/build_id_cache.hpp"
#include "ringcap/dso_files.hpp"
#include "record/spawn.hpp"
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

// The entry for a file as the session makes it: its path and mapped identity.
BuildIdEntry entry_for(const std::string& path, const std::vector<uint8_t>& id) {
    struct stat st{};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    DsoRef d{path, major(st.st_dev), minor(st.st_dev), st.st_ino, true, 0, 0, 0};
    return {path, id, false, d};
}

Dir open_cache(const std::string& path) {
    std::string why;
    Dir d = open_build_id_cache(path, &why);
    INFO(why);
    REQUIRE(d);
    return d;
}
}  // namespace

TEST_CASE("build-id cache: perf's layout, skipped when present, nothing for a changed file", "[format][buildid]") {
    TempDir root("cache");
    const std::string dir = root.path + "/.debug", elf = root.path + "/prog";
    REQUIRE(run_command(std::string("cp ") + RINGCAP_WORKLOAD + " " + elf).status == 0);
    const auto id = read_build_id(elf);
    if (!id) skip_test("the workload has no build-id (built without --build-id)");
    const std::string sid = hex(*id);
    const Dir cache = open_cache(dir);  // created: the directory is this user's

    auto st = add_to_build_id_cache(cache, {entry_for(elf, *id)});
    CHECK(st.added == 1);
    CHECK(st.error.empty());
    const std::string entry = dir + elf + "/" + sid + "/elf";
    CHECK(read_build_id(entry) == id);
    char target[4096] = {};
    const std::string link = dir + "/.build-id/" + sid.substr(0, 2) + "/" + sid.substr(2);
    REQUIRE(readlink(link.c_str(), target, sizeof target - 1) > 0);
    CHECK(std::string(target) == "../.." + elf + "/" + sid);

    st = add_to_build_id_cache(cache, {entry_for(elf, *id)});
    CHECK((st.added == 0 && st.present == 1));

    // The file changed on disk since it ran: not cached under the old build-id.
    std::vector<uint8_t> other = *id;
    other[0] ^= 0xff;
    st = add_to_build_id_cache(cache, {entry_for(elf, other)});
    CHECK((st.added == 0 && st.failed == 1));
    CHECK(st.error.find("caching " + elf) != std::string::npos);

    // Another file has the name now (same path, another inode): not cached.
    const std::string moved = root.path + "/prog2";
    BuildIdEntry stale = entry_for(elf, other);
    REQUIRE(run_command("cp " + elf + " " + moved + " && mv " + moved + " " + elf).status == 0);
    stale.id = *id;
    st = add_to_build_id_cache(cache, {stale});
    CHECK(st.added == 0);

    if (auto vdso = current_vdso()) {
        st = add_to_build_id_cache(cache, {{"[vdso]", vdso->id, false, {}}});
        CHECK(st.added == 1);
        const std::string v = read_file(dir + "/[vdso]/" + hex(vdso->id) + "/vdso");
        CHECK(v.size() == vdso->bytes.size());
        CHECK(v.compare(0, 4, "\x7f" "ELF") == 0);
    }
    if (auto k = kernel_build_id()) {
        st = add_to_build_id_cache(cache, {{"[kernel.kallsyms]", *k, true, {}}});
        CHECK(st.added == 1);
        struct stat ks{};
        REQUIRE(::stat((dir + "/[kernel.kallsyms]/" + hex(*k) + "/kallsyms").c_str(), &ks) == 0);
        CHECK((ks.st_mode & 0777) == 0600);  // real addresses: for the cache's owner only
    }
}

TEST_CASE("build-id cache: refused when a symlink, another user's or writable by others", "[format][buildid][security]") {
    TempDir root("cachedir", 0755);
    std::string why;
    // A symlink where the cache should be: not followed.
    TempDir elsewhere("cachetarget");
    REQUIRE(::symlink(elsewhere.path.c_str(), (root.path + "/link").c_str()) == 0);
    CHECK_FALSE(open_build_id_cache(root.path + "/link", &why));
    CHECK(why.find("symlink") != std::string::npos);
    // Writable by others.
    REQUIRE(::mkdir((root.path + "/open").c_str(), 0777) == 0);
    REQUIRE(::chmod((root.path + "/open").c_str(), 0777) == 0);
    CHECK_FALSE(open_build_id_cache(root.path + "/open", &why));
    CHECK(why.find("mode 0777") != std::string::npos);
    if (::geteuid() == 0) {
        // Another user's, and a missing one in another user's directory: neither used nor made.
        REQUIRE(::mkdir((root.path + "/theirs").c_str(), 0755) == 0);
        REQUIRE(::chown((root.path + "/theirs").c_str(), 65534, 65534) == 0);
        CHECK_FALSE(open_build_id_cache(root.path + "/theirs", &why));
        CHECK(why.find("uid 65534") != std::string::npos);
        CHECK_FALSE(open_build_id_cache(root.path + "/theirs/.debug", &why));
        struct stat st{};
        CHECK(::stat((root.path + "/theirs/.debug").c_str(), &st) != 0);
    }
    CHECK(open_build_id_cache(root.path + "/mine", &why));
}

TEST_CASE("build-id cache: copies only within the size limits, never more readable than the source",
          "[format][buildid][security]") {
    // /dev/shm is tmpfs, the cache on /tmp's filesystem (or the reverse): hard links fail with EXDEV.
    struct stat shm{}, tmp{};
    TempDir root("cachelim");
    if (::stat("/dev/shm", &shm) != 0 || ::stat(root.path.c_str(), &tmp) != 0 || shm.st_dev == tmp.st_dev)
        skip_test("needs /dev/shm on another filesystem than " + root.path + " (a copy, not a hard link)");
    char tmpl[] = "/dev/shm/ringcap-elf-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    const std::string src_dir = tmpl, elf = src_dir + "/prog";
    REQUIRE(run_command(std::string("cp ") + RINGCAP_WORKLOAD + " " + elf + " && chmod 0700 " + elf).status == 0);
    const auto id = read_build_id(elf);
    if (!id) skip_test("the workload has no build-id");
    const Dir cache = open_cache(root.path + "/.debug");
    struct stat est{};
    REQUIRE(::stat(elf.c_str(), &est) == 0);

    BuildIdCacheLimits small;
    small.max_file = uint64_t(est.st_size) - 1;
    auto st = add_to_build_id_cache(cache, {entry_for(elf, *id)}, small);
    CHECK(st.added == 0);
    CHECK(st.over_limit == 1);
    CHECK(st.bytes_copied == 0);
    BuildIdCacheLimits total;
    total.max_total = uint64_t(est.st_size) - 1;
    st = add_to_build_id_cache(cache, {entry_for(elf, *id)}, total);
    CHECK(st.over_limit == 1);

    st = add_to_build_id_cache(cache, {entry_for(elf, *id)});
    CHECK(st.added == 1);
    CHECK(st.linked == 0);
    CHECK(st.bytes_copied == uint64_t(est.st_size));
    struct stat cst{};
    REQUIRE(::stat((root.path + "/.debug" + elf + "/" + hex(*id) + "/elf").c_str(), &cst) == 0);
    CHECK((cst.st_mode & 0777) == 0600);  // the source was 0700: not readable by others here either
    run_command("rm -rf " + src_dir);
}

namespace {
// What the cache's copies take (files of one link: hard links take no room).
uint64_t cache_copies(const std::string& dir) {
    const auto r = run_command("find " + dir + " -type f -links 1 -printf '%s\\n' | awk '{s+=$1} END {print s+0}'");
    return std::stoull(r.output);
}

// Copies of the workload under /dev/shm (tmpfs: the cache on another filesystem copies them), each
// `size` bytes (sparse past the ELF); skips where /dev/shm is the cache's filesystem.
struct ShmElves {
    std::string dir;
    std::vector<std::string> paths;
    ShmElves(const std::string& cache_root, int n, uint64_t size = 0) {
        struct stat shm{}, root{};
        if (::stat("/dev/shm", &shm) != 0 || ::stat(cache_root.c_str(), &root) != 0 || shm.st_dev == root.st_dev)
            skip_test("needs /dev/shm on another filesystem than " + cache_root + " (copies, not hard links)");
        char tmpl[] = "/dev/shm/ringcap-elves-XXXXXX";
        REQUIRE(::mkdtemp(tmpl));
        dir = tmpl;
        for (int i = 0; i < n; ++i) {
            paths.push_back(dir + "/p" + std::to_string(i));
            REQUIRE(run_command(std::string("cp ") + RINGCAP_WORKLOAD + " " + paths.back() +
                                (size ? " && truncate -s " + std::to_string(size) + " " + paths.back() : ""))
                        .status == 0);
        }
    }
    ~ShmElves() { run_command("rm -rf " + dir); }
    uint64_t size() const {
        struct stat st{};
        REQUIRE(::stat(paths.front().c_str(), &st) == 0);
        return uint64_t(st.st_size);
    }
};
}  // namespace

TEST_CASE("build-id cache: files that add up past the record's cap: only what fits is copied",
          "[format][buildid][security]") {
    TempDir root("cachecap");
    const ShmElves elves(root.path, 3);
    const auto id = read_build_id(elves.paths.front());
    if (!id) skip_test("the workload has no build-id");
    const Dir cache = open_cache(root.path + "/.debug");
    const uint64_t size = elves.size();
    BuildIdCacheLimits cap;
    cap.max_total = size * 5 / 2;  // two of the three
    std::vector<BuildIdEntry> entries;
    for (const auto& p : elves.paths) entries.push_back(entry_for(p, *id));
    const auto st = add_to_build_id_cache(cache, entries, cap);
    CHECK(st.added == 2);
    CHECK(st.over_limit == 1);
    CHECK(st.bytes_copied == 2 * size);
    CHECK(cache_copies(root.path + "/.debug") <= cap.max_total);
}

TEST_CASE("build-id cache: a pass given up on stops copying, and what it took counts against the record's cap",
          "[format][buildid][security]") {
    // Two passes of one record (two --switch-output files): the first given up on (its time bound)
    // in the middle of a 64 MiB copy. Before, its copy went on detached, uncounted, and the second
    // pass copied as much again: the record's cache grew past --buildid-cache-max.
    TempDir root("cachetime");
    const ShmElves elves(root.path, 2, 64ull << 20);
    const auto id = read_build_id(elves.paths.front());
    if (!id) skip_test("the workload has no build-id");
    const Dir cache = open_cache(root.path + "/.debug");
    const uint64_t size = elves.size();
    BuildIdCacheLimits cap;
    cap.max_total = size * 3 / 2;  // one of the two
    cap.copied = std::make_shared<std::atomic<uint64_t>>(0);
    const auto first = add_to_build_id_cache(cache, {entry_for(elves.paths[0], *id)}, cap, std::chrono::milliseconds(1));
    const auto second = add_to_build_id_cache(cache, {entry_for(elves.paths[1], *id)}, cap);
    // The first pass's worker is done once it has let go of the budget: the cache is final then.
    REQUIRE(ringcap_test::eventually([&] { return cap.copied.use_count() == 1; }));
    const uint64_t copies = cache_copies(root.path + "/.debug");
    std::cout << "INFO: first pass " << (first.timed_out ? "given up on" : "done") << ", second: " << second.added
              << " added, " << second.over_limit << " over the cap; the cache's copies " << copies
              << " bytes against a cap of " << cap.max_total << ", the budget says " << cap.copied->load() << "\n";
    CHECK(copies <= cap.max_total);
    CHECK(cap.copied->load() == copies);  // what the record counts is what the cache holds
    CHECK(second.bytes_copied <= cap.max_total);
}
