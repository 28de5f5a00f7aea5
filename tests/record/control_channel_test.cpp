// --control fifo:CTL[,ACK]: ringcap runs as root, so the path is opened O_PATH first and used only
// if it is a FIFO: a regular file, a symlink or a device at the name is refused without being opened.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <fstream>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ringcap/control_channel.hpp"
#include "tools.hpp"

using namespace ringcap;
using Catch::Matchers::Contains;

TEST_CASE("control channel: a regular file, a symlink or a device at the name is refused without being opened",
          "[record][control][security]") {
    TempDir t("ctl");
    const std::string file = t.path + "/file", link = t.path + "/link", fifo = t.path + "/fifo", ack = t.path + "/ack";
    { std::ofstream(file) << "x"; }
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    REQUIRE(::mkfifo(ack.c_str(), 0600) == 0);
    REQUIRE(::symlink(fifo.c_str(), link.c_str()) == 0);
    UniqueFd in(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    REQUIRE(::inotify_add_watch(in.get(), file.c_str(), IN_OPEN) >= 0);
    CHECK_THROWS_WITH(ControlChannel("fifo:" + file), Contains("'" + file + "' (the control FIFO) is not a FIFO"));
    CHECK_THROWS_WITH(ControlChannel("fifo:" + fifo + "," + file), Contains("(the ack FIFO) is not a FIFO"));
    CHECK_THROWS_WITH(ControlChannel("fifo:" + link), Contains("is a symlink"));
    CHECK_THROWS_WITH(ControlChannel("fifo:" + t.path + "/none"), Contains("mkfifo " + t.path + "/none"));
    if (::mknod((t.path + "/null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {  // root
        REQUIRE(::inotify_add_watch(in.get(), (t.path + "/null").c_str(), IN_OPEN) >= 0);
        CHECK_THROWS_WITH(ControlChannel("fifo:" + t.path + "/null"), Contains("is not a FIFO"));
    }
    char ev[4096];
    CHECK(::read(in.get(), ev, sizeof ev) < 0);  // no IN_OPEN: neither the file nor the device was opened

    // The FIFOs themselves: commands in, "ack" out.
    ControlChannel c("fifo:" + fifo + "," + ack);
    UniqueFd w(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    REQUIRE(w);
    REQUIRE(::write(w.get(), "ping\n", 5) == 5);
    CHECK(c.take() == std::vector<std::string>{"ping"});
    UniqueFd r(::open(ack.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    REQUIRE(r);
    c.ack();
    char got[8] = {};
    CHECK(::read(r.get(), got, sizeof got - 1) == 4);
    CHECK(std::string(got) == "ack\n");
}
