// dir.hpp: names reached through a directory fd, nothing followed, nothing opened that blocks or is a
// device, temporaries nameless or unpredictable.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ringcap/dir.hpp"
#include "tools.hpp"

using namespace ringcap;

namespace {
void write_text(int fd, const std::string& s) { REQUIRE(::write(fd, s.data(), s.size()) == ssize_t(s.size())); }
}  // namespace

TEST_CASE("Dir::create: nameless until linked, link never replaces, replace never follows", "[util][dir]") {
    const bool named = GENERATE(false, true);
    INFO((named ? "named temporaries" : "O_TMPFILE"));
    force_named_temporaries(named);
    TempDir t("dir");
    TempFile victim("dir-victim");
    { std::ofstream(victim.path) << "precious"; }
    const Dir d = Dir::open(t.path);
    REQUIRE(d);
    {
        NewFile f = d.create("out", 0600);
        REQUIRE(f);
        write_text(f.fd(), "one");
        CHECK(dir_entries(t.path).size() == (named ? 1u : 0u));
        if (named) CHECK(f.temp_name().rfind("out.ringcap-tmp-", 0) == 0);
    }
    CHECK(dir_entries(t.path).empty());  // dropped unlinked: nothing left

    NewFile f = d.create("out", 0600);
    write_text(f.fd(), "two");
    REQUIRE(::symlink(victim.path.c_str(), (t.path + "/taken").c_str()) == 0);
    CHECK(d.link(f, "taken") == EEXIST);
    CHECK(d.link(f, "out") == 0);
    CHECK(dir_entries(t.path) == std::vector<std::string>{"out", "taken"});  // the temporary name is gone
    CHECK(read_file(t.path + "/out") == "two");

    // A symlink planted at the name is replaced, its target untouched.
    NewFile g = d.create("taken", 0644);
    write_text(g.fd(), "three");
    CHECK(d.replace(g, "taken") == 0);
    CHECK(read_file(victim.path) == "precious");
    struct stat st{};
    REQUIRE(::lstat((t.path + "/taken").c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK(read_file(t.path + "/taken") == "three");
    CHECK(dir_entries(t.path) == std::vector<std::string>{"out", "taken"});
    force_named_temporaries(false);
}

TEST_CASE("Dir::open_regular refuses symlinks, FIFOs and devices without opening them", "[util][dir][security]") {
    TempDir t("dirreg");
    const Dir d = Dir::open(t.path);
    { std::ofstream(t.path + "/file") << "x"; }
    REQUIRE(::symlink((t.path + "/file").c_str(), (t.path + "/link").c_str()) == 0);
    REQUIRE(::mkfifo((t.path + "/fifo").c_str(), 0600) == 0);
    struct stat st{};
    CHECK(d.open_regular("file", O_RDONLY, &st));
    CHECK(S_ISREG(st.st_mode));
    errno = 0;
    CHECK_FALSE(d.open_regular("link", O_RDONLY, &st));
    CHECK(errno == ELOOP);
    CHECK_FALSE(d.open_regular("fifo", O_RDONLY, &st));  // would block forever if opened O_RDONLY
    CHECK(errno == EINVAL);
    CHECK(S_ISFIFO(st.st_mode));
    CHECK_FALSE(d.open_regular("../etc", O_RDONLY, &st));
    CHECK(errno == EINVAL);
    if (::mknod((t.path + "/null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) return;  // not root
    // Opening a device can have effects (a watchdog reboots): watched, it must see no open at all.
    UniqueFd in(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    REQUIRE(::inotify_add_watch(in.get(), (t.path + "/null").c_str(), IN_OPEN) >= 0);
    CHECK_FALSE(d.open_regular("null", O_RDONLY, &st));
    CHECK(S_ISCHR(st.st_mode));
    REQUIRE(::symlink((t.path + "/null").c_str(), (t.path + "/null-link").c_str()) == 0);
    CHECK_FALSE(open_untrusted_file(t.path + "/null-link", st));
    CHECK_FALSE(open_untrusted_file(t.path + "/null", st));
    char ev[4096];
    CHECK(::read(in.get(), ev, sizeof ev) < 0);  // no IN_OPEN
}

TEST_CASE("without /proc/self/fd nothing is opened for reading: refused, not opened by name a second time",
          "[util][dir][security]") {
    // Opening the name again and comparing st_dev/st_ino afterwards would already have opened
    // whatever was renamed there since the O_PATH open (a device: the open itself has effects).
    TempDir t("dirnoproc");
    { std::ofstream(t.path + "/file") << "x"; }
    UniqueFd in(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    REQUIRE(::inotify_add_watch(in.get(), (t.path + "/file").c_str(), IN_OPEN) >= 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // /proc gone in a mount namespace of the child's own, made private first so that the unmount
        // does not propagate back (in a chroot "/" is no mount point: /proc alone is made private).
        if (::unshare(CLONE_NEWNS) != 0 ||
            (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 &&
             ::mount(nullptr, "/proc", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ||
            ::umount2("/proc", MNT_DETACH) != 0)
            _exit(77);
        const Dir d = Dir::open(t.path);
        struct stat st{};
        errno = 0;
        if (d.open_regular("file", O_RDONLY, &st)) _exit(1);
        if (errno != EOPNOTSUPP) _exit(2);
        if (open_untrusted_file(t.path + "/file", st)) _exit(3);
        if (errno != EOPNOTSUPP) _exit(4);
        _exit(0);
    }
    const int rc = wait_child(child);
    if (rc == 77) skip_test("cannot unmount /proc in a mount namespace of its own (unshare CLONE_NEWNS needs root)");
    INFO("child exit " << rc << " (1, 3: opened; 2, 4: another errno than EOPNOTSUPP)");
    CHECK(rc == 0);
    char ev[4096];
    CHECK(::read(in.get(), ev, sizeof ev) < 0);  // no IN_OPEN: never opened for reading
}

TEST_CASE("open_untrusted_file and Dir::beneath follow no symlink on the way", "[util][dir][security]") {
    TempDir t("dirpath");
    REQUIRE(::mkdir((t.path + "/real").c_str(), 0755) == 0);
    { std::ofstream(t.path + "/real/lib.so") << "lib"; }
    REQUIRE(::symlink((t.path + "/real").c_str(), (t.path + "/flip").c_str()) == 0);
    struct stat st{};
    CHECK(open_untrusted_file(t.path + "/real/lib.so", st));
    errno = 0;
    CHECK_FALSE(open_untrusted_file(t.path + "/flip/lib.so", st));
    CHECK(errno == ELOOP);

    const Dir d = Dir::open(t.path);
    CHECK(d.beneath("real"));
    CHECK_FALSE(d.beneath("flip"));
    CHECK_FALSE(d.beneath("flip/sub", /*create=*/true));
    CHECK(dir_entries(t.path + "/real") == std::vector<std::string>{"lib.so"});  // nothing made through the link
    CHECK_FALSE(d.beneath("real/../.."));
    const Dir made = d.beneath("a/b/c", true);
    CHECK(made);
    CHECK(made.path() == t.path + "/a/b/c");
    CHECK(d.beneath("a/b/c"));
}

TEST_CASE("reopen gives the same file without resolving its name again", "[util][dir]") {
    TempDir t("reopen");
    const Dir d = Dir::open(t.path);
    NewFile f = d.create("x", 0600);
    write_text(f.fd(), "abc");
    UniqueFd again = reopen(f.fd(), O_RDONLY);
    REQUIRE(again);
    char buf[4] = {};
    CHECK(::pread(again.get(), buf, 3, 0) == 3);
    CHECK(std::string(buf) == "abc");
    CHECK(random_suffix() != random_suffix());
    CHECK(random_suffix().size() == 16);
}
