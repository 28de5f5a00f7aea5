// OutputFile and the directory it lives in: what a record leaves held there while it runs.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "ringcap/output_file.hpp"
#include "ringcap/sys.hpp"
#include "tools.hpp"

using namespace ringcap;

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
