// BUILD_ID and the build-id cache at the end of each file: the files that samples hit (perf's rule;
// every file mapped executable with --buildid-all), opened as dso_files.hpp says, within bounded
// time. What was left out is said: on stderr when something refused or ran out of time, with -v always.
#include <iomanip>

#include "ringcap/build_id_cache.hpp"
#include "ringcap/dso_files.hpp"
#include "session.hpp"

namespace ringcap {

namespace {
// Reading the build-ids (a few preads per file, from the page cache) takes milliseconds; this bound
// is for a filesystem that stopped answering, which must not hold the end of a record.
constexpr auto kBuildIdTime = std::chrono::seconds(2);
// Copies into the cache may legitimately take seconds (hundreds of MB on another filesystem).
constexpr auto kCacheTime = std::chrono::seconds(10);
}  // namespace

std::vector<BuildIdEntry> Session::build_id_list() {
    const std::vector<DsoRef> dsos = dsos_.dsos(opts_.buildid_all);
    BuildIdPass pass = collect_build_ids(dsos, kBuildIdTime);
    const DsoRegistryStats rs = dsos_.stats();
    if (opts_.verbose) {
        log_ << "ringcap: build-ids: " << pass.entries.size() << " listed, of " << dsos.size() << " file(s) ";
        if (opts_.buildid_all)
            log_ << "mapped executable (--buildid-all)";
        else if (rs.all_hit)
            log_ << "mapped executable (too many sample pages or mappings to tell which were hit)";
        else
            log_ << "hit by samples (" << rs.files << " mapped executable; --buildid-all lists them all)";
        log_ << ", " << pass.skipped << " skipped, in " << std::fixed << std::setprecision(3) << pass.seconds << " s\n";
    }
    if (pass.timed_out || pass.refused > 0 || (opts_.verbose && pass.skipped > 0)) {
        clear_status();
        log_ << "ringcap: " << (pass.timed_out || pass.refused ? "warning: " : "") << "build-ids: " << pass.skipped
             << " of " << dsos.size() << " file(s) left out";
        if (pass.timed_out)
            log_ << " (reading them took over " << kBuildIdTime.count() << " s: a filesystem not answering?)";
        log_ << "; first: " << pass.first_skip << "\n";
    }
    return std::move(pass.entries);
}

void Session::cache_build_ids(const std::vector<BuildIdEntry>& build_ids) {
    // As perf record: the binaries go to ~/.debug, so perf report still symbolizes this profile after
    // they are rebuilt. After the file is complete: a failure here costs symbols later, not data.
    const std::string path = default_build_id_cache_dir();
    if (path.empty()) return;  // no HOME (an init script, a minimal container): as perf, no cache
    std::string why;
    const Dir dir = open_build_id_cache(path, &why);
    if (!dir) {
        clear_status();
        log_ << "ringcap: warning: no build-id cache: " << why << "\n";
        return;
    }
    BuildIdCacheLimits limits;
    limits.max_file = opts_.buildid_cache_max_file;
    limits.max_total = opts_.buildid_cache_max;
    limits.copied = cache_copied_;
    const BuildIdCacheStats c = add_to_build_id_cache(dir, build_ids, limits, kCacheTime);
    if (opts_.verbose)
        log_ << "ringcap: build-id cache " << path << ": " << c.added << " added (" << c.linked << " hard links, "
             << human_bytes(c.bytes_copied) << " copied), " << c.present << " already there, in " << std::fixed
             << std::setprecision(3) << c.seconds << " s\n";
    if (!c.error.empty()) {
        clear_status();
        log_ << "ringcap: warning: the build-id cache (" << path << ") misses " << std::max<size_t>(c.failed, 1)
             << " file(s): " << c.error;
        if (c.over_limit)
            log_ << "; " << c.over_limit << " over --buildid-cache-max (" << human_bytes(opts_.buildid_cache_max) << ","
                 << human_bytes(opts_.buildid_cache_max_file) << ")";
        log_ << "; perf report needs the binaries as they were (or -N to skip the cache)\n";
    }
}

}  // namespace ringcap
