// OutputFile and the directory it lives in: what a record leaves held there while it runs, when its
// lock goes, what a start that finds the file locked says, and when the file appears at its path.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <fstream>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ringcap/output_file.hpp"
#include "ringcap/sys.hpp"
#include "tools.hpp"
#include "writer_rig.hpp"

using namespace ringcap;
using namespace writer_rig;

TEST_CASE("OutputFile: the directory lock is held only while names change, not for the record", "[writer]") {
    TempDir dir("outfile-lock");
    const std::string path = dir.path + "/perf.data";
    OutputFile f = OutputFile::create(path, /*allow_direct=*/false);
    // Another start in the same directory (a second record, rotation's next file) takes the lock
    // at once: before, the record's own directory fd kept it, and every later start waited a second
    // and then went on without it.
    UniqueFd other(::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(other);
    CHECK(::flock(other.get(), LOCK_EX | LOCK_NB) == 0);
    ::flock(other.get(), LOCK_UN);
    f.publish();
    CHECK(::flock(other.get(), LOCK_EX | LOCK_NB) == 0);
    ::flock(other.get(), LOCK_UN);
    // The file's own lock (another ringcap writing it) stays.
    UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(file);
    CHECK(::flock(file.get(), LOCK_SH | LOCK_NB) != 0);
}

TEST_CASE("OutputFile: the lock is on none of the fds io_uring gets, so it goes with the process", "[writer]") {
    TempDir dir("outfile-ring-lock");
    const std::string path = dir.path + "/perf.data";
    UniqueFd ring_direct, ring_buffered;  // what io_uring keeps of the files a Writer gives it
    {
        OutputFile f = OutputFile::create(path, /*allow_direct=*/true);
        f.publish();
        ring_direct.reset(::fcntl(f.direct_fd(), F_DUPFD_CLOEXEC, 0));
        ring_buffered.reset(::fcntl(f.buffered_fd(), F_DUPFD_CLOEXEC, 0));
        REQUIRE(ring_direct);
        REQUIRE(ring_buffered);
        UniqueFd other(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        REQUIRE(other);
        CHECK(::flock(other.get(), LOCK_SH | LOCK_NB) != 0);  // held while the record runs
    }
    // The process's own fds are closed (as at its exit), the ring's not yet (after SIGKILL the
    // kernel tears it down asynchronously): the lock is gone all the same.
    UniqueFd other(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(other);
    CHECK(::flock(other.get(), LOCK_EX | LOCK_NB) == 0);
}

TEST_CASE("OutputFile: a file a running process locks is refused at once, naming it, and a lock no running process "
          "holds is waited for, then explained",
          "[writer]") {
    TempDir dir("outfile-busy");
    const std::string path = dir.path + "/perf.data";
    std::ofstream(path) << "previous capture";
    auto refusal = [&] {
        try {
            OutputFile::create(path, false);
        } catch (const Error& e) {
            CHECK(e.exit_code() == 2);
            return std::string(e.what());
        }
        return std::string("created");
    };
    SECTION("held by a running process") {
        UniqueFd held(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        REQUIRE(::flock(held.get(), LOCK_EX | LOCK_NB) == 0);
        CHECK(refusal() == "another ringcap is writing '" + path + "' (pid " + std::to_string(::getpid()) +
                               "): choose another -o than '" + path + "'");
    }
    SECTION("held by an open file whose locker has exited") {
        // A child locks the file and exits; its own child keeps the locked description open (as a
        // ring being torn down kept a killed ringcap's) until the test closes `release`.
        int p[2];
        REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
        UniqueFd wait_end(p[0]), release(p[1]);
        const pid_t locker = ::fork();
        REQUIRE(locker >= 0);
        if (locker == 0) {
            const int fd = ::open(path.c_str(), O_RDONLY);
            if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) _exit(1);
            if (::fork() == 0) {
                ::close(p[1]);
                char c;
                (void)!::read(p[0], &c, 1);  // until the test closes its end
                _exit(0);
            }
            _exit(0);
        }
        int status = 0;
        REQUIRE(::waitpid(locker, &status, 0) == locker);  // reaped: /proc/locks names a pid that is gone
        REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
        const std::string text = refusal();
        CHECK(text.rfind("'" + path + "' is still locked after 1 s, and no running process ringcap can see holds it "
                         "(its holder exited, or runs in another PID namespace): a killed ringcap's lock goes once "
                         "its last writes have ended",
                         0) == 0);
        CHECK(text.find("choose another -o than '" + path + "'") != std::string::npos);
    }
}

TEST_CASE("OutputFile appears at its path only when published", "[writer]") {
    // Nameless (O_TMPFILE) here; where a filesystem lacks it, under an unpredictable temporary name.
    const bool named = GENERATE(false, true);
    INFO((named ? "named temporaries" : "O_TMPFILE"));
    force_named_temporaries(named);
    TempPath t;
    {
        UniqueFd old(::open(t.path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        REQUIRE(old);
        REQUIRE(::write(old.get(), "old", 3) == 3);
    }
    {
        OutputFile f = OutputFile::create(t.path, true);
        f.pwrite_all("new!", 4, 0);
        // The old file, the marker that says a ringcap is starting on it, and a named temporary.
        const auto during = dir_entries(t.dir);
        CHECK(during.size() == (named ? 3u : 2u));
        CHECK(std::count_if(during.begin(), during.end(),
                            [](const std::string& e) { return e.rfind(".out.data.ringcap-starting-", 0) == 0; }) == 1);
        CHECK(leftover_temporaries(t.path) == (named ? 1u : 0u));
        CHECK(file_size(t.path) == 3);  // the existing file is untouched until publish()
    }
    CHECK(dir_entries(t.dir) == std::vector<std::string>{"out.data"});  // never published: no trace
    CHECK(file_size(t.path) == 3);

    OutputFile f = OutputFile::create(t.path, true);
    f.pwrite_all("new!", 4, 0);
    f.publish();
    CHECK(file_size(t.path) == 4);
    CHECK(file_size(t.path + ".old") == 3);  // kept, as perf does
    CHECK(dir_entries(t.dir) == std::vector<std::string>{"out.data", "out.data.old"});
    // Rotation's rename: a new name made from the fd, never over an existing file.
    CHECK(f.rename_to(t.dir + "/out.data.old") == false);
    CHECK(f.rename_to(t.dir + "/out.data.1"));
    CHECK(dir_entries(t.dir) == std::vector<std::string>{"out.data.1", "out.data.old"});
    CHECK(file_size(t.dir + "/out.data.1") == 4);
    force_named_temporaries(false);
}
