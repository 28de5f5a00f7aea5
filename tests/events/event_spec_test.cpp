// perf's event names and modifiers, resolved without the kernel.
#include <catch2/catch.hpp>

#include "ringcap/events.hpp"

using namespace ringcap;

TEST_CASE("modifiers set the exclude bits and precise level as perf's parser does", "[events]") {
    auto attr = [](const std::string& name) { return make_attr(parse_event(name), SamplingConfig{}); };
    const auto u = attr("cpu-clock:u");
    CHECK((!u.exclude_user && u.exclude_kernel && u.exclude_hv && u.exclude_guest));
    const auto k = attr("cpu-clock:k");
    CHECK((k.exclude_user && !k.exclude_kernel && k.exclude_hv && !k.exclude_guest));
    const auto uk = attr("task-clock:uk");
    CHECK((!uk.exclude_user && !uk.exclude_kernel && uk.exclude_hv));
    const auto ppp = attr("cpu-clock:ppp");
    CHECK((ppp.precise_ip == 3 && ppp.exclude_guest && !ppp.exclude_user && !ppp.exclude_kernel));
    CHECK(attr("cpu-clock:P").precise_ip == 3);
    const auto g = attr("cpu-clock:G");
    CHECK((!g.exclude_guest && g.exclude_host));
    const auto h = attr("cpu-clock:H");
    CHECK((h.exclude_guest && !h.exclude_host));
    CHECK(parse_event("cpu-clock:u").name == "cpu-clock:u");  // perf keeps the modifiers in the name
    const auto plain = attr("cpu-clock");
    CHECK((!plain.exclude_user && !plain.exclude_kernel && plain.precise_ip == 0 && !plain.exclude_guest));
}

TEST_CASE("modifiers perf does not have, or ringcap does not implement, are refused by name", "[events]") {
    CHECK_THROWS_WITH(parse_event("cpu-clock:q"), Catch::Contains("modifier 'q' is not one of perf's"));
    CHECK_THROWS_WITH(parse_event("cpu-clock:S"), Catch::Contains("does not implement"));
    CHECK_THROWS_WITH(parse_event("cpu-clock:pppp"), Catch::Contains("at most 3"));
    CHECK_THROWS_WITH(parse_event_list("cycles:u,bogus"), Catch::Contains("unknown event 'bogus'"));
}

TEST_CASE("the tracking event asks for BPF and JIT symbols (ksymbol, bpf_event)", "[events]") {
    const auto a = make_attr(tracking_event(), SamplingConfig{});
    CHECK(a.ksymbol == 1);
    CHECK(a.bpf_event == 1);
}

TEST_CASE("the default event is perf's fallback from cycles:P", "[events]") {
    const auto d = default_event();
    CHECK(d.name == "cpu-clock:ppp");
    CHECK(d.config == PERF_COUNT_SW_CPU_CLOCK);
    const auto a = make_attr(d, SamplingConfig{});
    CHECK((a.precise_ip == 3 && !a.exclude_guest));
}
