// ringcap: a thin CLI over the core library.
#include <iostream>
#include <sstream>
#include <unistd.h>
#include <mimalloc.h>
#include <string>
#include <vector>

#include "ringcap/json_report.hpp"
#include "ringcap/options.hpp"
#include "ringcap/pipe_output.hpp"
#include "ringcap/recorder.hpp"

namespace {
const char* const kUsage =
    "usage: ringcap record [options] [-- COMMAND [ARGS...]]\n"
    "       ringcap --version\n"
    "Captures perf_event samples through io_uring into a perf.data file that perf report reads.\n"
    "Run 'ringcap record --help' for the options.\n";
// --help: the commands and options of ringcap(1), in --help's layout (tests/docs/man_check.sh
// compares the two).
const char* const kHelp =
    "usage: ringcap record [options] [-- COMMAND [ARGS...]]\n"
    "       ringcap --version\n"
    "       ringcap --help\n"
    "Captures perf_event samples through io_uring into a perf.data file that perf report reads.\n"
    "Commands:\n"
    "  record         record samples into a file ('ringcap record --help' lists its options)\n"
    "Options:\n"
    "  -h, --help     print this help and exit\n"
    "      --version  print the version and exit\n"
    "See ringcap(1) and ringcap-record(1).\n";
}

int main(int argc, char** argv) {
    std::vector<std::string> args(argv, argv + argc);
    if (args.size() < 2) {
        std::cerr << kUsage;
        return 2;
    }
    if (args[1] == "-h" || args[1] == "--help") {
        std::cout << kHelp;  // asked for: standard output, as record --help
        return 0;
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
    // --json is written on every exit, so it is found before the command line is parsed.
    std::string json = ringcap::json_path_in(rest);
    // With -o - stdout carries the perf data: never a JSON summary too (the parser refuses the pair).
    if (json == "-" && ringcap::pipe_output_in(rest)) json.clear();
    ringcap::RecordSummary summary;
    std::string error;
    int rc = 1;
    // -q: the progress and summary go nowhere; what failed is still said (below, and ERROR lines).
    std::ostringstream quiet_log;
    bool quiet = false;
    try {
        ringcap::RecordOptions opts = ringcap::parse_record_args(rest);
        opts.argv = args;
        quiet = opts.quiet;
        opts.live_status = !quiet && isatty(STDERR_FILENO);
        rc = ringcap::run_record(opts, quiet ? static_cast<std::ostream&>(quiet_log) : std::cerr, &summary);
    } catch (const ringcap::Error& e) {
        error = e.what();
        rc = e.exit_code();
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (quiet) {
        std::istringstream lines(quiet_log.str());
        for (std::string l; std::getline(lines, l);)
            if (l.find("ERROR") != std::string::npos) std::cerr << l << "\n";
    }
    if (!error.empty()) std::cerr << "ringcap: " << error << "\n";
    if (!json.empty()) {
        try {
            ringcap::write_json_summary(json, ringcap::summary_json(summary, rc, error));
        } catch (const ringcap::Error& e) {
            std::cerr << "ringcap: " << e.what() << "\n";
            if (rc == 0) rc = 1;  // a scheduler waiting for the JSON must not take silence for success
        }
    }
    return rc;
}
