// ringcap: a thin CLI over the core library.
#include <iostream>
#include <mimalloc.h>
#include <string>
#include <vector>

#include "ringcap/options.hpp"
#include "ringcap/recorder.hpp"

namespace {
const char* const kUsage =
    "usage: ringcap record [options] [-- COMMAND [ARGS...]]\n"
    "       ringcap --version\n"
    "Captures perf_event samples through io_uring into a perf.data file that perf report reads.\n"
    "Run 'ringcap record --help' for the options.\n";
}

int main(int argc, char** argv) {
    std::vector<std::string> args(argv, argv + argc);
    if (args.size() < 2 || args[1] == "-h" || args[1] == "--help") {
        std::cerr << kUsage;
        return args.size() < 2 ? 2 : 0;
    }
    if (args[1] == "--version") {
        std::cout << "ringcap 0.1.0 (mimalloc " << mi_version() << ")\n";
        return 0;
    }
    if (args[1] != "record") {
        std::cerr << "ringcap: unknown command '" << args[1] << "'\n" << kUsage;
        return 2;
    }
    std::vector<std::string> rest(args.begin() + 2, args.end());
    for (const auto& a : rest) {
        if (a == "--") break;
        if (a == "-h" || a == "--help") {
            std::cout << ringcap::kRecordUsage;
            return 0;
        }
    }
    try {
        ringcap::RecordOptions opts = ringcap::parse_record_args(rest);
        opts.argv = args;
        return ringcap::run_record(opts, std::cerr);
    } catch (const ringcap::Error& e) {
        std::cerr << "ringcap: " << e.what() << "\n";
        return e.exit_code();
    } catch (const std::exception& e) {
        std::cerr << "ringcap: " << e.what() << "\n";
        return 1;
    }
}
