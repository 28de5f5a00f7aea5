// ringcap runs as root; every process hands it paths (its mappings) and sometimes directories (a
// job's working directory, a user's HOME). Each attack here is made by the user nobody against a root
// ringcap, and each failed against ringcap before its fix (docs/security.md has the threat model).
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <iostream>
#include <fstream>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/sysmacros.h>

#include "record/spawn.hpp"
#include "ringcap/dir.hpp"
#include "ringcap/dso_files.hpp"
#include "ringcap/output_file.hpp"
#include "tools.hpp"

using namespace ringcap;
using namespace ringcap_test;

namespace {

constexpr uid_t kNobody = 65534;

// A directory of nobody's (a user's project directory or HOME: writable by them, not sticky). Made
// before any CHECK: it skips now, not after them, where there is no user nobody to run the attack.
struct UserDir : TempDir {
    explicit UserDir(const std::string& tag) : TempDir(tag, 0755) {
        require_nobody();
        REQUIRE(::chown(path.c_str(), kNobody, kNobody) == 0);
    }
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

// The exit status, or a failure (and SIGKILL) if the child is still running after `seconds`: a
// detector for a hung ringcap, not a timing requirement. `took` receives the time it took (printed
// for the record, never compared with a bound).
int wait_exit_or_hang(const Running& r, double* took = nullptr, int seconds = 60) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < seconds * 100; ++i) {
        int status = 0;
        if (::waitpid(r.pid, &status, WNOHANG) == r.pid) {
            if (took) *took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        const timespec ten_ms{0, 10'000'000};
        ::nanosleep(&ten_ms, nullptr);
    }
    ::kill(r.pid, SIGKILL);
    wait_exit(r);
    FAIL("ringcap hung (still running after " << seconds << " s)");
    return -1;
}

// A child that is killed when the test ends, however it ends.
struct KilledAtEnd {
    pid_t pid;
    ~KilledAtEnd() {
        ::kill(pid, SIGKILL);
        wait_child(pid);
    }
};

bool exists(const std::string& p) {
    struct stat st{};
    return ::lstat(p.c_str(), &st) == 0;
}

// A system-wide record as root that runs until SIGINT, its HOME set to `home` ("" leaves it).
Running start_record(const std::vector<std::string>& args, const std::string& log, const std::string& home) {
    Running r = spawn(args, log, [home] {
        if (!home.empty()) ::setenv("HOME", home.c_str(), 1);
    });
    return r;
}

// nobody runs `prog` (a copy of the workload) to its end: its samples make it a DSO with samples.
void run_workload_as_nobody(const std::string& prog) {
    const pid_t p = run_as_nobody([&] {
        ::execl(prog.c_str(), prog.c_str(), "600", nullptr);
        return 127;
    });
    REQUIRE(wait_child(p) == 0);
}

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

TEST_CASE("security: no build-id cache in a HOME another user owns, nor through a .debug symlink planted there",
          "[security][buildid]") {
    require_root();
    require_kernel();
    UserDir home("sec-home");
    TempDir out("sec-home-out");
    TempFile log("sec-home-log");
    const std::string cmd = " record -a -F 1000 -o " + out.path + "/p.data -- " + std::string(RINGCAP_WORKLOAD) + " 300 2>&1";
    // No .debug there: none is made (root's files in a user's HOME are theirs to swap).
    auto r = run_command("HOME=" + home.path + " " + kRingcap + cmd);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("no build-id cache: " + home.path + " is owned by uid 65534") != std::string::npos);
    CHECK(dir_entries(home.path).empty());
    // A .debug symlink planted by its owner, to a directory of root's: nothing is written there.
    TempDir target("sec-home-target", 0700);
    const pid_t plant = run_as_nobody([&] { return ::symlink(target.path.c_str(), (home.path + "/.debug").c_str()); });
    REQUIRE(wait_child(plant) == 0);
    r = run_command("HOME=" + home.path + " " + kRingcap + cmd);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("is a symlink or not a directory") != std::string::npos);
    CHECK(dir_entries(target.path).empty());
}

TEST_CASE("security: a mapped file swapped for a FIFO, a device symlink or a directory symlink is never opened",
          "[security][buildid]") {
    require_root();
    // Before any CHECK: a skip (exit 77) after a failed CHECK would report the failure as a skip.
    const std::string perf = require_kernel_and_perf();
    enum class Swap { Fifo, DeviceLink, DirectoryFlip };
    const Swap swap = GENERATE(Swap::Fifo, Swap::DeviceLink, Swap::DirectoryFlip);
    UserDir u("sec-map");
    TempDir home("sec-map-home", 0700), out("sec-map-out");
    TempDir devdir("sec-map-dev", 0755);
    TempFile log("sec-map-log");
    const std::string d = u.path + "/d", prog = d + "/prog";
    REQUIRE(wait_child(run_as_nobody([&] { return ::mkdir(d.c_str(), 0755); })) == 0);
    REQUIRE(run_command("cp " + std::string(RINGCAP_WORKLOAD) + " " + prog + " && chown nobody: " + prog).status == 0);
    // What root must not open: a device node (watched for opens), a root-only ELF behind a symlink.
    const std::string node = devdir.path + "/null";
    REQUIRE(::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);
    UniqueFd watch(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    REQUIRE(::inotify_add_watch(watch.get(), node.c_str(), IN_OPEN) >= 0);
    Victim secret;
    REQUIRE(run_command("cp /bin/true " + secret.dir.path + "/prog && chmod 0600 " + secret.dir.path + "/prog").status == 0);
    const auto secret_id = read_build_id(secret.dir.path + "/prog");

    const std::string data = out.path + "/p.data";
    Running rec = start_record({"record", "-a", "-F", "1000", "-o", data}, log.path, home.path);
    REQUIRE(eventually([&] { return exists(data); }));  // published: the record runs
    run_workload_as_nobody(prog);                      // samples hit it; it has exited
    // The swap, by nobody, before the record ends and reads build-ids.
    const pid_t swapper = run_as_nobody([&] {
        switch (swap) {
            case Swap::Fifo: return ::mkfifo((d + "/fifo").c_str(), 0644) | ::rename((d + "/fifo").c_str(), prog.c_str());
            case Swap::DeviceLink: return ::symlink(node.c_str(), (d + "/l").c_str()) | ::rename((d + "/l").c_str(), prog.c_str());
            case Swap::DirectoryFlip:
                return ::rename(d.c_str(), (d + ".real").c_str()) | ::symlink(secret.dir.path.c_str(), d.c_str());
        }
        return 1;
    });
    REQUIRE(wait_child(swapper) == 0);
    ::kill(rec.pid, SIGINT);
    double took = 0;
    const int rc = wait_exit_or_hang(rec, &took);
    const char* names[] = {"a FIFO", "a device symlink", "a directory flipped to a symlink"};
    std::cout << "INFO: mapped file swapped for " << names[int(swap)] << ": ringcap exited " << took
              << " s after SIGINT\n";
    const std::string text = read_file(log.path);
    INFO(text);
    CHECK(rc == 0);
    // Said, not silent: the file is left out of the build-ids, with the reason.
    const char* reason = swap == Swap::Fifo ? "not a regular file now" : "its path leads through a symlink now";
    CHECK(text.find(prog + ": " + reason) != std::string::npos);
    char ev[4096];
    CHECK(::read(watch.get(), ev, sizeof ev) < 0);  // the device was never opened
    // The root-only file behind the symlink is neither listed nor copied into the cache.
    if (secret_id) {
        std::string sid;
        char b[3];
        for (uint8_t x : *secret_id) std::snprintf(b, sizeof b, "%02x", x), sid += b;
        CHECK(run_command(perf + " buildid-list -i " + data + " 2>&1").output.find(sid) == std::string::npos);
        CHECK_FALSE(exists(home.path + "/.debug/.build-id/" + sid.substr(0, 2) + "/" + sid.substr(2)));
    }
    CHECK(secret.intact());
}

TEST_CASE("security: a mapped file whose open would wait for its lease to break does not hold the end of a record",
          "[security][buildid]") {
    require_root();
    const std::string perf = require_kernel_and_perf();
    UserDir u("sec-lease");
    TempDir home("sec-lease-home", 0700), out("sec-lease-out");
    TempFile log("sec-lease-log");
    const std::string d = u.path + "/d", prog = d + "/prog";
    REQUIRE(wait_child(run_as_nobody([&] { return ::mkdir(d.c_str(), 0755); })) == 0);
    REQUIRE(run_command("cp " + std::string(RINGCAP_WORKLOAD) + " " + prog + " && chown nobody: " + prog).status == 0);
    const std::string data = out.path + "/p.data";
    Running rec = start_record({"record", "-v", "-a", "-F", "1000", "-o", data}, log.path, home.path);
    REQUIRE(eventually([&] { return exists(data); }));
    run_workload_as_nobody(prog);  // samples hit it; it has exited: root opens it by its path
    // nobody takes a write lease on it (their file, open nowhere else) and keeps it, ignoring the
    // SIGIO of a break: an open for reading would then wait lease-break-time (45 s) for it.
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const KilledAtEnd holder{run_as_nobody([&] {
        ::signal(SIGIO, SIG_IGN);
        const int fd = ::open(prog.c_str(), O_RDONLY);
        const char ok = fd >= 0 && ::fcntl(fd, F_SETLEASE, F_WRLCK) == 0;
        if (::write(ready[1], &ok, 1) != 1) return 1;
        for (;;) ::pause();
    })};
    char ok = 0;
    REQUIRE(::read(ready[0], &ok, 1) == 1);
    ::close(ready[0]);
    ::close(ready[1]);
    REQUIRE(ok == 1);
    ::kill(rec.pid, SIGINT);
    double took = 0;
    const int rc = wait_exit_or_hang(rec, &took);
    std::cout << "INFO: mapped file under a write lease: ringcap exited " << took << " s after SIGINT\n";
    const std::string text = read_file(log.path);
    INFO(text);
    CHECK(rc == 0);
    // The open failed at once (O_NONBLOCK) instead of waiting: neither pass ran out of its time.
    CHECK(text.find("reading them took over") == std::string::npos);
    CHECK(text.find("not done in") == std::string::npos);
    // Left out, saying why, or read (had the lease been given up meanwhile).
    const bool left_out = text.find(prog + ": another process holds a lease on it") != std::string::npos;
    const bool listed = run_command(perf + " buildid-list -i " + data + " 2>&1").output.find(prog) != std::string::npos;
    INFO("left out: " << left_out << ", listed: " << listed);
    CHECK((left_out || listed));
}

TEST_CASE("security: a 2 GiB sparse ELF on another filesystem is not copied into the build-id cache",
          "[security][buildid]") {
    require_root();
    require_kernel();
    require_nobody();
    TempDir home("sec-sparse-home", 0700), out("sec-sparse-out");
    TempFile log("sec-sparse-log");
    struct stat shm{}, h{};
    if (::stat("/dev/shm", &shm) != 0 || ::stat(home.path.c_str(), &h) != 0 || shm.st_dev == h.st_dev)
        skip_test("needs /dev/shm on another filesystem than " + home.path + " (the cache copies, not links)");
    char tmpl[] = "/dev/shm/ringcap-sparse-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    const std::string dir = tmpl, prog = dir + "/prog";
    REQUIRE(::chown(dir.c_str(), kNobody, kNobody) == 0);
    REQUIRE(wait_child(run_as_nobody([&] {
                const std::string cmd = "cp " + std::string(RINGCAP_WORKLOAD) + " " + prog + " && truncate -s 2G " + prog;
                return std::system(cmd.c_str()) == 0 ? 0 : 1;
            })) == 0);
    const std::string data = out.path + "/p.data";
    Running rec = start_record({"record", "-a", "-F", "1000", "-o", data}, log.path, home.path);
    REQUIRE(eventually([&] { return exists(data); }));
    run_workload_as_nobody(prog);
    ::kill(rec.pid, SIGINT);
    const int rc = wait_exit_or_hang(rec);
    const std::string text = read_file(log.path);
    INFO(text);
    CHECK(rc == 0);
    CHECK(text.find("caching " + prog + " (over the cache's size limits)") != std::string::npos);
    // What the cache took: its copies (files of one link; the hard links take no room).
    const auto du = run_command("find " + home.path + "/.debug -type f -links 1 -printf '%s\\n' | awk '{s+=$1} END {print s+0}'");
    INFO("cache copies: " << du.output);
    CHECK(std::stoull(du.output) < (64ull << 20));  // /proc/kallsyms and the vDSO, not 2 GiB
    CHECK_FALSE(exists(home.path + "/.debug" + dir));  // nothing made for it
    run_command("rm -rf " + dir);
}

TEST_CASE("security: files and locks another user makes at ringcap's names do not stop a root record",
          "[security][writer]") {
    require_root();
    require_kernel();
    require_nobody();
    // What nobody makes at the output's name and its .old, besides the locks: a locked file (moved to
    // .old as perf moves any), a FIFO or a directory (refused, exit 2, before: check_path), and a
    // directory at .old, which a rename cannot replace (EISDIR, ENOTEMPTY: exit 2 before).
    enum class Plant { LockedFile, Fifo, Directory, FileAndOldDirectory, DirectoryAndOldDirectory };
    const Plant plant = GENERATE(Plant::LockedFile, Plant::Fifo, Plant::Directory, Plant::FileAndOldDirectory,
                                 Plant::DirectoryAndOldDirectory);
    const char* names[] = {"a locked file", "a FIFO", "a directory", "a file and a directory at .old",
                           "a directory and a non-empty one at .old"};
    INFO("nobody made " << names[int(plant)]);
    TempDir tmp("sec-lock", 01777);  // as /tmp: world-writable, sticky
    const std::string out = tmp.path + "/x.data", old = out + ".old";
    const bool old_dir = plant == Plant::FileAndOldDirectory || plant == Plant::DirectoryAndOldDirectory;
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    // nobody holds flocks on the old predictable temporary name, on a name like a starting
    // ringcap's marker and on the directory itself (and on the output's name when it is a file).
    const KilledAtEnd holder{run_as_nobody([&] {
        std::vector<int> fds = {::open((out + ".ringcap-tmp").c_str(), O_RDWR | O_CREAT, 0644),
                                ::open(tmp.path.c_str(), O_RDONLY | O_DIRECTORY),
                                // What a starting ringcap marks its start with (another user's: not one of root's).
                                ::open((tmp.path + "/.x.data.ringcap-starting-0").c_str(), O_RDWR | O_CREAT, 0644)};
        if (plant == Plant::LockedFile || plant == Plant::FileAndOldDirectory)
            fds.push_back(::open(out.c_str(), O_RDWR | O_CREAT, 0644));
        if (plant == Plant::Fifo && ::mkfifo(out.c_str(), 0644) != 0) return 1;
        if ((plant == Plant::Directory || plant == Plant::DirectoryAndOldDirectory) && ::mkdir(out.c_str(), 0755) != 0)
            return 1;
        if (old_dir && ::mkdir(old.c_str(), 0755) != 0) return 1;
        if (plant == Plant::DirectoryAndOldDirectory && ::close(::open((old + "/f").c_str(), O_RDWR | O_CREAT, 0644)) != 0)
            return 1;
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
    CHECK(st.st_uid == 0);  // root's capture
    CHECK(S_ISREG(st.st_mode));
    // What nobody made is moved aside, never written through: to .old, or where .old cannot take it
    // (a directory there), to a name of its own beside it, said on stderr.
    std::string aside = old;
    if (old_dir) {
        REQUIRE(::lstat(old.c_str(), &st) == 0);
        CHECK((S_ISDIR(st.st_mode) && st.st_uid == kNobody));  // left as it was
        aside.clear();
        for (const auto& e : dir_entries(tmp.path))
            if (e.rfind("x.data.old.", 0) == 0) aside = tmp.path + "/" + e;
        REQUIRE(!aside.empty());
        CHECK(r.output.find("to '" + aside + "'") != std::string::npos);
    }
    REQUIRE(::lstat(aside.c_str(), &st) == 0);
    CHECK(st.st_uid == kNobody);
    CHECK(bool(plant == Plant::Fifo ? S_ISFIFO(st.st_mode)
               : plant == Plant::Directory || plant == Plant::DirectoryAndOldDirectory ? S_ISDIR(st.st_mode)
                                                                                        : S_ISREG(st.st_mode)));
    if (plant == Plant::Fifo || plant == Plant::Directory)
        CHECK(r.output.find("moved uid 65534's " + std::string(plant == Plant::Fifo ? "FIFO" : "directory") + " at '" +
                            out + "' to '" + old + "'") != std::string::npos);
}
