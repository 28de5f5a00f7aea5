// ringcap runs as root; every process hands it paths (its mappings) and sometimes directories (a
// job's working directory, a user's HOME). Each attack here is made by the user nobody against a root
// ringcap, and each failed against ringcap before its fix.
#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <sys/file.h>

#include "record/spawn.hpp"
#include "ringcap/dir.hpp"
#include "ringcap/output_file.hpp"
#include "tools.hpp"

using namespace ringcap;
using namespace ringcap_test;

namespace {

constexpr uid_t kNobody = 65534;

// A directory of nobody's (a user's project directory or HOME: writable by them, not sticky).
struct UserDir : TempDir {
    explicit UserDir(const std::string& tag) : TempDir(tag, 0755) { REQUIRE(::chown(path.c_str(), kNobody, kNobody) == 0); }
};

// A root-only file that an attack tries to overwrite or leak, in a root-only directory.
struct Victim {
    TempDir dir{"victim", 0700};
    std::string path = dir.path + "/secret";
    Victim() {
        std::ofstream(path) << "precious";
        ::chmod(path.c_str(), 0600);
    }
    bool intact() const { return read_file(path) == "precious"; }
};

// A child that is killed when the test ends, however it ends.
struct KilledAtEnd {
    pid_t pid;
    ~KilledAtEnd() {
        ::kill(pid, SIGKILL);
        wait_child(pid);
    }
};

}  // namespace

TEST_CASE("security: --json replaces a symlink planted at its name or its old temporary name, never writes through it",
          "[security][json]") {
    require_root();
    require_kernel();
    UserDir u("sec-json");
    Victim v;
    const pid_t plant = run_as_nobody([&] {
        return ::symlink(v.path.c_str(), (u.path + "/x.json.ringcap-tmp").c_str()) |
               ::symlink(v.path.c_str(), (u.path + "/y.json").c_str());
    });
    REQUIRE(wait_child(plant) == 0);
    TempDir out("sec-json-out");
    for (const char* json : {"x.json", "y.json"}) {
        auto r = run_command(kRingcap + " record -a -F 100 --duration 0.1 -q -o " + out.path + "/p.data --json " +
                             u.path + "/" + json + " 2>&1");
        INFO(r.output);
        CHECK(r.status == 0);
        struct stat st{};
        REQUIRE(::lstat((u.path + "/" + json).c_str(), &st) == 0);
        CHECK(S_ISREG(st.st_mode));
        CHECK(read_file(u.path + "/" + json).find("\"version\"") != std::string::npos);
    }
    CHECK(v.intact());
}

TEST_CASE("security: the output in a directory its user writes is never reached by name (1000 tries against "
          "symlinks renamed over every name in it)",
          "[security][writer]") {
    require_root();
    const bool named = GENERATE(false, true);  // O_TMPFILE, and the named temporaries of filesystems without it
    INFO((named ? "named temporaries" : "O_TMPFILE"));
    UserDir u("sec-out");
    Victim v;
    // The attacker: forever, a symlink to the victim renamed over every name in the directory.
    const KilledAtEnd attacker{run_as_nobody([&] {
        for (unsigned n = 0;; ++n) {
            for (const auto& e : dir_entries(u.path)) {
                if (e.rfind(".s", 0) == 0) continue;
                const std::string s = u.path + "/.s" + std::to_string(n % 64);
                ::symlink(v.path.c_str(), s.c_str());
                ::rename(s.c_str(), (u.path + "/" + e).c_str());
            }
            // The predictable temporary name of before, in case it shows up.
            const std::string s = u.path + "/.t";
            ::symlink(v.path.c_str(), s.c_str());
            ::rename(s.c_str(), (u.path + "/perf.data.ringcap-tmp").c_str());
        }
        return 0;
    })};
    force_named_temporaries(named);
    alignas(4096) static char block[4096];
    std::memset(block, 'R', sizeof block);
    int published = 0, refused = 0;
    for (int i = 0; i < 1000; ++i) {
        OutputFile f = OutputFile::create(u.path + "/perf.data", true);
        // Both fds: the O_DIRECT one is the first one re-opened, not the name.
        REQUIRE(::pwrite(f.direct_fd(), block, sizeof block, 4096) == ssize_t(sizeof block));
        f.pwrite_all("head", 4, 0);
        char back[5] = {};
        REQUIRE(f.pread_some(back, 4, 0) == 4);
        REQUIRE(std::string(back) == "head");
        try {
            f.publish();
            ++published;
        } catch (const Error& e) {
            // A named temporary the attacker renamed something over has no name left to publish:
            // refused, saying so (their own directory: they can stop a capture into it).
            REQUIRE(named);
            REQUIRE(std::string(e.what()).find("another user removed or replaced its temporary file") != std::string::npos);
            ++refused;
        }
    }
    force_named_temporaries(false);
    INFO(published << " published, " << refused << " refused");
    CHECK(published + refused == 1000);
    if (!named) CHECK(refused == 0);
    CHECK(v.intact());
}

TEST_CASE("security: files and locks another user makes at ringcap's names do not stop a root record",
          "[security][writer]") {
    require_root();
    require_kernel();
    TempDir tmp("sec-lock", 01777);  // as /tmp: world-writable, sticky
    const std::string out = tmp.path + "/x.data";
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    // nobody holds flocks on the old predictable temporary name, on the output's name and on the
    // directory itself, and keeps them.
    const KilledAtEnd holder{run_as_nobody([&] {
        int fds[3] = {::open((out + ".ringcap-tmp").c_str(), O_RDWR | O_CREAT, 0644),
                      ::open(out.c_str(), O_RDWR | O_CREAT, 0644), ::open(tmp.path.c_str(), O_RDONLY | O_DIRECTORY)};
        for (int fd : fds)
            if (fd < 0 || ::flock(fd, LOCK_EX) != 0) return 1;
        const char c = 1;
        if (::write(ready[1], &c, 1) != 1) return 1;
        ::pause();
        return 0;
    })};
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    auto r = run_command(kRingcap + " record -a -F 100 --duration 0.2 -o " + out + " 2>&1");
    ::close(ready[0]);
    ::close(ready[1]);
    INFO(r.output);
    CHECK(r.status == 0);
    struct stat st{};
    REQUIRE(::lstat(out.c_str(), &st) == 0);
    CHECK(st.st_uid == 0);  // root's capture, nobody's file moved to .old as perf moves any
    REQUIRE(::lstat((out + ".old").c_str(), &st) == 0);
    CHECK(st.st_uid == kNobody);
}
