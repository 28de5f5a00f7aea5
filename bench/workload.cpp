// A workload with a known profile: one hot function reached through two named callers, about 2/3
// of the time through caller_heavy and 1/3 through caller_light. Built with frame pointers and no
// inlining so both -g and --call-graph dwarf can show main -> caller -> hot_loop.
//   usage: ringcap_workload [ITERATIONS]   (default 3000, roughly a second)
#include <cstdio>
#include <cstdlib>

extern "C" {

__attribute__((noinline)) unsigned long hot_loop(unsigned long n) {
    volatile unsigned long acc = 0;
    for (unsigned long i = 0; i < n; ++i) acc = acc * 31 + i;
    return acc;
}

__attribute__((noinline)) unsigned long caller_heavy(unsigned long n) { return hot_loop(2 * n) + 1; }

__attribute__((noinline)) unsigned long caller_light(unsigned long n) { return hot_loop(n) + 2; }

}  // extern "C"

int main(int argc, char** argv) {
    const unsigned long iterations = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 3000;
    unsigned long sum = 0;
    for (unsigned long i = 0; i < iterations; ++i) {
        sum += caller_heavy(100000);
        sum += caller_light(100000);
    }
    std::printf("%lu\n", sum & 1);
    return 0;
}
