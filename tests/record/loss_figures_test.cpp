// One source for every loss figure: what the summary, the JSON and the file (LOST and LOST_SAMPLES
// records, as perf counts them) say the kernel dropped agree, per event and in total. (A LOST
// record carries the id of the event that wrote next, so per event only the kernel's counts read at
// the end are exact; before this the tracking event's share was counted twice.)
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <sstream>

#include "tools.hpp"

namespace {
const std::string kRingcap = RINGCAP_BINARY;

// The kernel's PERF_RECORD_LOST records in the file, their `lost` values summed (perf script -D).
long long lost_records_sum(const std::string& perf, const std::string& file) {
    auto r = run_command(perf + " script -D -i " + file +
                         " 2>/dev/null | awk '/PERF_RECORD_LOST: / { sub(\"lost:\", \"\", $NF); s += $NF } END { print s + 0 }'");
    return std::stoll(r.output);
}
}  // namespace

TEST_CASE("tiny rings where the kernel drops: the summary, the JSON and the file agree on every loss, per event",
          "[unattended][lost]") {
    const std::string perf = require_kernel_and_perf();
    TempDir dir("lost-figures");
    const std::string out = dir.path + "/perf.data", json = dir.path + "/summary.json";
    // 4-page rings hold two dwarf samples; two events and the tracking event share each ring, and
    // processes start all the time: LOST records carry whichever event wrote next, samples and side-band
    // records are both lost. A wake-up only every 100000 records: the rings are drained on the
    // collectors' tick, so the kernel drops on every run.
    auto r = run_command(kRingcap + " record -a -m 4 --call-graph dwarf -e cpu-clock,task-clock -F 2000 --wakeup-events 100000 "
                                    "--duration 2 -o " + out + " --json " + json +
                                    " -- sh -c 'busy() { i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; }; "
                                    "busy & while :; do /bin/true; done' 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    const nlohmann::json j = nlohmann::json::parse(read_file(json), nullptr, false);
    REQUIRE(j.is_object());
    const long long lost = j["lost"];
    CHECK(lost > 0);
    CHECK(summary_value(r.output, "lost") == lost);
    // The kernel's own LOST records count what it dropped once each, but the last drops of a ring
    // are only written as one when a later record fits; the per-event counts read at the end
    // (LOST_SAMPLES in the file) have them all.
    const long long in_records = lost_records_sum(perf, out);
    CHECK(in_records > 0);
    CHECK(in_records <= lost);
    // Per event: JSON, summary line and perf's LOST_SAMPLES for that event (perf report --stats).
    const PerfStats st = perf_report_stats(perf, out);
    INFO(st.output);
    REQUIRE(st.ok());
    REQUIRE(j["events"].size() == 2);
    long long per_event = 0;
    for (const auto& e : j["events"]) {
        const std::string name = e["name"];
        const long long n = e["lost"];
        INFO(name);
        per_event += n;
        CHECK(r.output.find("event " + name + ": samples " + std::to_string(e["samples"].get<long long>()) +
                            ", kernel-lost " + std::to_string(n)) != std::string::npos);
        const auto at = std::find(st.event_names.begin(), st.event_names.end(), name);
        REQUIRE(at != st.event_names.end());
        CHECK(st.event_count(size_t(at - st.event_names.begin()), "LOST_SAMPLES") == n);
    }
    // What the events do not account for is the tracking event's (COMM, MMAP2... records): said apart.
    CHECK(per_event <= lost);
    CHECK(st.events_sum("LOST_SAMPLES") == lost);
}
