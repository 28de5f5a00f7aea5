// The collector on synthetic rings (the bench's many-ring source): the same loop, reader and writer
// as for perf rings, and the file must be a perf.data that perf reads with the same counts.
#include <catch2/catch.hpp>

#include <liburing.h>
#include <regex>
#include <sstream>

#include "ringcap/perf_data_reader.hpp"
#include "ringcap/recorder.hpp"
#include "support.hpp"
#include "tools.hpp"

using namespace ringcap;

namespace {

void require_uring() {
    io_uring ring;
    if (int rc = io_uring_queue_init(4, &ring, 0); rc < 0)
        skip_test(std::string("io_uring_setup refused: ") + std::strerror(-rc));
    io_uring_queue_exit(&ring);
}

long long perf_count(const std::string& out, const std::string& what) {
    std::smatch m;
    if (std::regex_search(out, m, std::regex("\\s" + what + " events:\\s+([0-9]+)"))) return std::stoll(m[1]);
    return -1;
}

RecordSummary record_synthetic(const std::string& path, unsigned rings, double mb_per_ring, size_t pages,
                               std::string* log_out) {
    RecordOptions o;
    o.synthetic.rings = rings;
    o.synthetic.mb_per_ring = mb_per_ring;
    o.synthetic.record_bytes = 2048;
    o.mmap_pages = pages;
    o.duration_s = 0.3;
    o.output = path;
    o.build_ids = false;
    std::ostringstream log;
    RecordSummary sum;
    const int rc = run_record(o, log, &sum);
    *log_out = log.str();
    INFO(*log_out);
    REQUIRE(rc == 0);
    return sum;
}

}  // namespace

TEST_CASE("synthetic rings: 64 rings drained into a perf.data that perf counts the same", "[record][synthetic]") {
    require_uring();
    const std::string perf = find_perf();
    if (perf.empty()) skip_test("perf (linux-perf) is not installed: cannot read the file back");
    TempFile f("synth");
    std::string log;
    const RecordSummary sum = record_synthetic(f.path, 64, 1.0, 8, &log);
    INFO(log);
    CHECK(sum.backend == "io_uring");
    CHECK(sum.cpus.size() == 64);
    REQUIRE(sum.total.samples > 0);
    // Every sample offered is in the file or counted as dropped.
    CHECK(sum.synthetic_offered == sum.total.samples + sum.kernel_lost);
    CHECK(sum.total.bad_headers == 0);
    for (const auto& c : sum.cpus) CHECK(c.ring.samples > 0);  // every ring was polled and drained

    std::string err;
    auto file = read_perf_data(f.path, &err);
    REQUIRE(file);
    CHECK(file->counts.samples == sum.total.samples);
    CHECK(file->counts.lost_samples == sum.kernel_lost);
    CHECK(file->counts.unknown_ids == 0);
    CHECK(!file->counts.truncated);

    auto stats = run_command(perf + " report --stats -i " + f.path + " 2>&1");
    INFO(stats.output);
    REQUIRE(stats.status == 0);
    CHECK(perf_count(stats.output, "SAMPLE") == (long long)sum.total.samples);
}

TEST_CASE("synthetic rings: drops at full rings reach the file as LOST and LOST_SAMPLES", "[record][synthetic]") {
    require_uring();
    TempFile f("synth-drop");
    std::string log;
    // 2 rings of one page at 100 MB/s each: 4 KiB holds one 2 KiB sample and a bit, and the collector
    // wakes at a quarter of that; drops are certain.
    const RecordSummary sum = record_synthetic(f.path, 2, 100.0, 1, &log);
    INFO(log);
    REQUIRE(sum.kernel_lost > 0);
    CHECK(sum.synthetic_offered == sum.total.samples + sum.kernel_lost);
    CHECK(log.find("dropped") != std::string::npos);
    std::string err;
    auto file = read_perf_data(f.path, &err);
    REQUIRE(file);
    CHECK(file->counts.samples == sum.total.samples);
    CHECK(file->counts.lost_samples == sum.kernel_lost);
    CHECK(file->counts.lost > 0);  // in-stream LOST records, as the kernel writes
    CHECK(file->counts.lost <= sum.kernel_lost);
}
