// -o - on the command line: what goes with it and what is refused (exit status 2).
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "ringcap/options.hpp"
#include "ringcap/pipe_output.hpp"

using namespace ringcap;

namespace {
int refused(const std::string& args) {
    try {
        parse_record_args(split(args));
    } catch (const Error& e) {
        return e.exit_code();
    }
    return 0;
}
}  // namespace

TEST_CASE("pipe options: -o - with --pipe-backlog, refused with --json -, --switch-output, --max-size, or without -o -", "[cli][pipe]") {
    CHECK(parse_record_args(split("-a -o -")).output == "-");
    CHECK(parse_record_args(split("-a -o - --pipe-backlog 8M")).pipe_backlog == (8u << 20));
    CHECK(parse_record_args(split("-a -o - --pipe-backlog=2G")).pipe_backlog == (2ull << 30));
    CHECK(parse_record_args(split("-a -o - --json out.json")).json == "out.json");
    CHECK(refused("-a -o - --json -") == 2);
    CHECK(refused("-a --pipe-backlog 8M") == 2);
    CHECK(refused("-a -o - --pipe-backlog 100K") == 2);
    CHECK(refused("-a -o - --pipe-backlog lots") == 2);
    // Rotation and a size limit are for files.
    CHECK(refused("-a -o - --switch-output") == 2);
    CHECK(refused("-a -o - --switch-output=1G") == 2);
    CHECK(refused("-a -o - --max-size 1G") == 2);
}

TEST_CASE("pipe options: main() finds -o - before parsing (no JSON on the stream, even on bad usage)", "[cli][pipe]") {
    CHECK(pipe_output_in(split("-a -o -")));
    CHECK(pipe_output_in(split("-a --output -")));
    CHECK(pipe_output_in(split("-a --output=-")));
    CHECK(pipe_output_in(split("-a -o-")));
    CHECK_FALSE(pipe_output_in(split("-a -o x.data")));
    CHECK_FALSE(pipe_output_in(split("-a -o - -o x.data")));  // the last -o wins
    CHECK_FALSE(pipe_output_in(split("-a -- prog -o -")));    // the command's own arguments
    CHECK_FALSE(pipe_output_in(split("-a")));
}
