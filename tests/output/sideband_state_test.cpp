// The flight recorder's state of tasks and mappings (sideband_state.hpp), on hand-made records; and
// what a rotated file takes from it for the tasks its /proc scan no longer found.
#include <catch2/catch.hpp>

#include <cstring>
#include <linux/perf_event.h>
#include <map>
#include <string>
#include <vector>

#include "ringcap/records.hpp"
#include "ringcap/sideband_state.hpp"

using namespace ringcap;

namespace {

// kDefaultSampleType's sample_id: {pid, tid}, time, {cpu, res}, id.
void sample_id(std::vector<std::byte>& r, uint64_t time) {
    const uint64_t id[4] = {0, time, 0, 0};
    const auto* b = reinterpret_cast<const std::byte*>(id);
    r.insert(r.end(), b, b + sizeof id);
}

std::vector<std::byte> record(uint32_t type, uint16_t misc, const void* body, size_t len, const std::string& text,
                              uint64_t time) {
    std::vector<std::byte> r(sizeof(perf_event_header));
    const auto* b = static_cast<const std::byte*>(body);
    r.insert(r.end(), b, b + len);
    if (!text.empty()) {
        const size_t padded = (text.size() + 1 + 7) & ~size_t(7);
        const size_t at = r.size();
        r.resize(at + padded);
        std::memcpy(r.data() + at, text.data(), text.size());
    }
    sample_id(r, time);
    const perf_event_header h{type, misc, uint16_t(r.size())};
    std::memcpy(r.data(), &h, sizeof h);
    return r;
}

std::vector<std::byte> comm(uint32_t pid, uint32_t tid, const std::string& name, uint64_t t, bool exec = false) {
    const CommBody b{pid, tid};
    return record(PERF_RECORD_COMM, exec ? PERF_RECORD_MISC_COMM_EXEC : 0, &b, sizeof b, name, t);
}
std::vector<std::byte> fork_exit(uint32_t type, uint32_t pid, uint32_t ppid, uint32_t tid, uint32_t ptid, uint64_t t) {
    const ForkBody b{pid, ppid, tid, ptid, t};
    return record(type, 0, &b, sizeof b, "", t);
}
std::vector<std::byte> mmap2(uint32_t pid, uint64_t addr, uint64_t len, const std::string& path, uint64_t t) {
    Mmap2Body b{};
    b.pid = b.tid = pid;
    b.addr = addr;
    b.len = len;
    b.prot = 5;  // PROT_READ | PROT_EXEC
    return record(PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER, &b, sizeof b, path, t);
}

void add(SidebandState& s, const std::vector<std::byte>& r) { s.add(r.data(), r.size()); }

// What emit() describes: threads (pid/tid -> name) and each process's mapped paths, in order.
struct Seen {
    std::map<std::pair<uint32_t, uint32_t>, std::string> threads;
    std::map<uint32_t, std::vector<std::string>> maps;
};
Seen parse(const std::vector<std::byte>& out) {
    Seen v;
    for (size_t at = 0; at < out.size();) {
        perf_event_header h;
        std::memcpy(&h, out.data() + at, sizeof h);
        REQUIRE(h.size >= sizeof h);
        REQUIRE(h.size % 8 == 0);
        const std::byte* body = out.data() + at + sizeof h;
        if (h.type == PERF_RECORD_COMM) {
            CommBody b;
            std::memcpy(&b, body, sizeof b);
            v.threads[{b.pid, b.tid}] = reinterpret_cast<const char*>(body + sizeof b);
        } else if (h.type == PERF_RECORD_MMAP2) {
            Mmap2Body b;
            std::memcpy(&b, body, sizeof b);
            v.maps[b.pid].push_back(reinterpret_cast<const char*>(body + sizeof b));
        }
        at += h.size;
    }
    return v;
}
Seen seen(const SidebandState& s) {
    std::vector<std::byte> out;
    s.emit(out);
    return parse(out);
}

}  // namespace

TEST_CASE("sideband state: records up to the window's start are folded, later ones wait", "[sideband]") {
    SidebandState s;
    add(s, comm(10, 10, "app", 0));
    add(s, mmap2(10, 0x1000, 0x1000, "/usr/bin/app", 0));
    add(s, mmap2(10, 0x7000, 0x1000, "/usr/lib/libfoo.so", 500));
    add(s, fork_exit(PERF_RECORD_FORK, 10, 10, 11, 10, 600));  // a thread
    add(s, fork_exit(PERF_RECORD_FORK, 20, 10, 20, 10, 700));  // a child process
    add(s, comm(20, 20, "child", 800, true));                    // which execs
    add(s, mmap2(20, 0x2000, 0x1000, "/usr/bin/child", 900));
    s.fold(650);
    Seen v = seen(s);
    CHECK(v.threads.size() == 2);
    CHECK(v.threads[{10, 11}] == "app");  // a new thread takes its process's name
    CHECK(v.maps[10] == std::vector<std::string>{"/usr/bin/app", "/usr/lib/libfoo.so"});
    CHECK(s.pending() == 3);
    s.fold(1000);
    v = seen(s);
    CHECK(v.threads[{20, 20}] == "child");
    // The child had its parent's mappings until its exec; after it, only its own.
    CHECK(v.maps[20] == std::vector<std::string>{"/usr/bin/child"});
    CHECK(s.processes() == 2);
}

TEST_CASE("sideband state: an exit is folded only once it is well before the window's start", "[sideband]") {
    SidebandState s;
    add(s, comm(30, 30, "short", 0));
    add(s, mmap2(30, 0x1000, 0x1000, "/usr/bin/short", 0));
    const uint64_t exit_at = 5'000'000'000;
    add(s, fork_exit(PERF_RECORD_EXIT, 30, 1, 30, 1, exit_at));
    // Samples of it may still come just after the window's start: it stays named.
    s.fold(exit_at + SidebandState::kExitLagNs / 2);
    CHECK(seen(s).threads.count({30, 30}) == 1);
    CHECK(s.pending() == 1);
    s.fold(exit_at + SidebandState::kExitLagNs + 1);
    CHECK(seen(s).threads.empty());
    CHECK(s.processes() == 0);
}

TEST_CASE("sideband state: a mapping replaces the older ones it covers, partial overlaps stay in order", "[sideband]") {
    SidebandState s;
    add(s, comm(40, 40, "jit", 0));
    add(s, mmap2(40, 0x10000, 0x1000, "/tmp/old-a", 1));
    add(s, mmap2(40, 0x11000, 0x1000, "/tmp/old-b", 2));
    add(s, mmap2(40, 0x11800, 0x1000, "/tmp/straddles", 3));
    add(s, mmap2(40, 0x10000, 0x2000, "/tmp/new", 4));  // covers old-a and old-b
    s.fold(10);
    CHECK(seen(s).maps[40] == std::vector<std::string>{"/tmp/straddles", "/tmp/new"});
    CHECK(s.mappings() == 2);
}

TEST_CASE("sideband state: other records and short ones are ignored", "[sideband]") {
    SidebandState s;
    const uint64_t lost[2] = {1, 2};
    auto r = record(PERF_RECORD_LOST, 0, lost, sizeof lost, "", 5);
    s.add(r.data(), r.size());
    auto c = comm(1, 1, "x", 5);
    s.add(c.data(), c.size() - 8);  // its size field says more
    CHECK(s.pending() == 0);
    CHECK(SidebandState::wanted(PERF_RECORD_MMAP2));
    CHECK_FALSE(SidebandState::wanted(PERF_RECORD_SAMPLE));
}

TEST_CASE("sideband state: at a rotation, the next file gets the tasks of the switch its /proc scan no longer found",
          "[sideband][rotation]") {
    // Before the switch (at t): a long-lived process with two threads, a short-lived child (its FORK
    // and COMM in the previous file), a process that exited long before, and the kernel.
    SidebandState s;
    add(s, comm(10, 10, "daemon", 0));
    add(s, mmap2(10, 0x1000, 0x1000, "/usr/bin/daemon", 0));
    add(s, fork_exit(PERF_RECORD_FORK, 10, 10, 11, 10, 0));
    Mmap2Body k{};
    k.pid = k.tid = UINT32_MAX;  // the kernel's map
    k.addr = 0xffffffff81000000;
    k.len = 0x1000000;
    add(s, record(PERF_RECORD_MMAP2, PERF_RECORD_MISC_KERNEL, &k, sizeof k, "[kernel.kallsyms]_text", 0));
    s.fold(0);
    const uint64_t t = 10'000'000'000;
    add(s, fork_exit(PERF_RECORD_FORK, 30, 1, 30, 1, 100));
    add(s, fork_exit(PERF_RECORD_EXIT, 30, 1, 30, 1, 200));
    add(s, fork_exit(PERF_RECORD_FORK, 20, 10, 20, 10, t - 1000));
    add(s, comm(20, 20, "worker", t - 900, true));
    add(s, mmap2(20, 0x2000, 0x1000, "/usr/bin/worker", t - 800));
    // It and thread 11 exit after the switch, before the next file's scan: their samples from after
    // the switch are in that file, and so are their EXITs (which the collectors hand over too).
    add(s, fork_exit(PERF_RECORD_EXIT, 20, 10, 20, 10, t + 500'000));
    add(s, fork_exit(PERF_RECORD_EXIT, 10, 10, 11, 10, t + 600'000));
    // Everything handed over, the exits before the switch only.
    s.fold(s.newest(), t);
    CHECK(s.pending() == 2);
    CHECK(s.processes() == 2);  // 30 is gone
    // The scan found process 10's main thread only.
    std::vector<std::byte> out;
    s.emit_gone(out, TaskSet{{10, 10}});
    const Seen v = parse(out);
    using Threads = std::map<std::pair<uint32_t, uint32_t>, std::string>;
    CHECK(v.threads == Threads{{{10, 11}, "daemon"}, {{20, 20}, "worker"}});
    // The mappings of the process the scan did not find; the others' and the kernel's are the scan's.
    CHECK(v.maps == std::map<uint32_t, std::vector<std::string>>{{20, {"/usr/bin/worker"}}});
    // A scan that found everything adds nothing.
    out.clear();
    s.emit_gone(out, TaskSet{{10, 10}, {10, 11}, {20, 20}});
    CHECK(out.empty());
    // At the next switch the exits are before it: nothing is carried any more.
    const uint64_t t2 = t + 1'000'000'000;
    add(s, comm(10, 10, "daemon", t2 - 100));
    s.fold(s.newest(), t2);
    out.clear();
    s.emit_gone(out, TaskSet{{10, 10}});
    CHECK(out.empty());
    CHECK(s.pending() == 0);
    CHECK(s.processes() == 1);
}

TEST_CASE("sideband state: a forked child that does not exec carries its parent's mappings as its own",
          "[sideband][rotation]") {
    SidebandState s;
    add(s, comm(50, 50, "sh", 0));
    add(s, mmap2(50, 0x1000, 0x1000, "/usr/bin/dash", 0));
    add(s, mmap2(50, 0x7000, 0x1000, "/usr/lib/libc.so.6", 1));
    add(s, fork_exit(PERF_RECORD_FORK, 51, 50, 51, 50, 100));  // a subshell: no exec
    s.fold(200);
    // A file that starts after the fork and whose scan found the parent only: the child's mappings
    // must name the child, in the body and in the sample_id, or its samples resolve to nothing
    // (and the parent's mappings come twice).
    std::vector<std::byte> out;
    s.emit_gone(out, TaskSet{{50, 50}});
    const Seen v = parse(out);
    CHECK(v.maps == std::map<uint32_t, std::vector<std::string>>{{51, {"/usr/bin/dash", "/usr/lib/libc.so.6"}}});
    size_t checked = 0;
    for (size_t at = 0; at < out.size(); at += reinterpret_cast<const perf_event_header*>(out.data() + at)->size) {
        perf_event_header h;
        std::memcpy(&h, out.data() + at, sizeof h);
        if (h.type != PERF_RECORD_MMAP2) continue;
        Mmap2Body b;
        std::memcpy(&b, out.data() + at + sizeof h, sizeof b);
        uint32_t id[2];
        std::memcpy(id, out.data() + at + h.size - 32, sizeof id);
        CHECK((b.pid == 51 && b.tid == 51 && id[0] == 51 && id[1] == 51));
        ++checked;
    }
    CHECK(checked == 2);
    // The parent's own mappings are untouched.
    CHECK(seen(s).maps[50] == std::vector<std::string>{"/usr/bin/dash", "/usr/lib/libc.so.6"});
}
