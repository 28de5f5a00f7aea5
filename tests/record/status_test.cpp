// The live status line (stderr a terminal, run under script(1) from util-linux) and -q.
#include <catch2/catch.hpp>

#include "spawn.hpp"
#include "tools.hpp"

using namespace ringcap_test;

TEST_CASE("status line: refreshed in place every second on a terminal, absent otherwise", "[status]") {
    require_kernel();
    if (run_command("command -v script >/dev/null 2>&1").status != 0)
        skip_test("script (util-linux) is not installed: cannot give ringcap a terminal");
    TempFile out("status"), typescript("status-tty");
    const std::string cmd = kRingcap + " record -a -F 1000 -o " + out.path + " --duration 2.5";
    REQUIRE(run_command("script -qec '" + cmd + "' " + typescript.path + " >/dev/null 2>&1").status == 0);
    const std::string tty = read_file(typescript.path);
    INFO(tty);
    // Two refreshes (at 1 and 2 s), each "\r...\x1b[K", then the line erased before the summary.
    size_t lines = 0;
    for (size_t at = tty.find("\rringcap: "); at != std::string::npos; at = tty.find("\rringcap: ", at + 1))
        if (tty.compare(at, 40, "\rringcap: stopped", 0, 17) != 0) ++lines;
    CHECK(lines >= 2);
    CHECK(std::regex_search(tty, std::regex("ringcap: \\d+ s  \\d+ samples/s  [0-9.]+ MB/s written  lost \\d+  "
                                            "staging \\d+ %  file [0-9.]+ [KMG]?i?B\x1b\\[K")));
    CHECK(tty.find("\r\x1b[Kringcap: stopped (duration reached)") != std::string::npos);

    const auto piped = run_command(cmd + " 2>&1");
    CHECK(piped.status == 0);
    CHECK(piped.output.find("samples/s") == std::string::npos);
    CHECK(piped.output.find("ringcap: stopped (duration reached)") != std::string::npos);
}

TEST_CASE("quiet (-q) prints nothing on success and the reason on failure", "[status]") {
    require_kernel();
    TempFile out("quiet");
    auto ok = run_command(kRingcap + " record -q -a -F 500 -o " + out.path + " -- true 2>&1");
    CHECK(ok.status == 0);
    CHECK(ok.output.empty());
    auto bad = run_command(kRingcap + " record -q -a -o /nonexistent-dir/x.data -- true 2>&1");
    CHECK(bad.status == 2);
    CHECK(bad.output.find("ringcap: output directory '/nonexistent-dir' does not exist") != std::string::npos);

    SmallFs fs("1m");
    std::vector<std::string> args{"record", "-q", "-a", "-F", "10000", "-g", "-o", fs.dir + "/perf.data"};
    args.insert(args.end(), kBusy.begin(), kBusy.end());
    TempFile log("quiet-full");
    CHECK(wait_exit(spawn(args, log.path)) == 1);
    const std::string text = read_file(log.path);
    INFO(text);
    CHECK(text.find("ringcap: ERROR: writing") != std::string::npos);
    CHECK(text.find("samples=") == std::string::npos);  // no summary
}

TEST_CASE("status line: a file dumped by --switch-output is said on a line of its own", "[status][rotation]") {
    require_kernel();
    if (run_command("command -v script >/dev/null 2>&1").status != 0)
        skip_test("script (util-linux) is not installed: cannot give ringcap a terminal");
    TempDir dir("status-rot");
    TempFile typescript("status-rot-tty");
    const std::string cmd = kRingcap + " record -a -F 1000 -o " + dir.path + "/perf.data --duration 3.5 --switch-output=1s";
    REQUIRE(run_command("script -qec '" + cmd + "' " + typescript.path + " >/dev/null 2>&1").status == 0);
    const std::string tty = read_file(typescript.path);
    INFO(tty);
    size_t dumps = 0, status_lines = 0;
    for (size_t at = tty.find("ringcap: [ dump "); at != std::string::npos; at = tty.find("ringcap: [ dump ", at + 1)) {
        ++dumps;
        // At the start of a line: after a newline, or after the status line was erased ("\r\x1b[K").
        const bool own_line = at == 0 || tty[at - 1] == '\n' || (at >= 4 && tty.compare(at - 4, 4, "\r\x1b[K") == 0);
        CHECK(own_line);
    }
    for (size_t at = tty.find(" samples/s "); at != std::string::npos; at = tty.find(" samples/s ", at + 1)) ++status_lines;
    CHECK(dumps >= 3);           // one a second, and the last at the end
    CHECK(status_lines >= 2);    // the status line kept coming back between the dumps
}
