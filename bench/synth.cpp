// Synthetic many-ring benchmark: how fast ringcap's collector threads (io_uring multishot poll ->
// ring reader -> staging -> batched O_DIRECT writes -> perf.data) drain N rings, against what this
// machine can do. The rings are the test kit's SyntheticSource (testkit/synthetic_source.hpp): ordinary
// memory with a perf ring's layout, filled by one producer thread as the kernel fills perf rings, and
// recorded through the same RingSource seam as perf events.
//
//   ringcap_synthbench [--rings 1,16,64,256,512] [--total-mb 1024] [--duration 2] [--record-bytes 8192]
//                      [--pages 128] [--staging-buffers N] [--staging-kb 1024] [--dirs DIR,...]
//                      [--threads 1,2,4] [--modes fixed,max] [--compress LEVEL] [--json] [--perf PERF|none]
//                      [--keep]
//
// --compress: record with -z LEVEL; the samples' stacks are then varied copies of a random template
// (not one repeated byte, which zstd would take at memory speed), and each run also prints the
// uncompressed MB/s the collector compressed, the ratio and the CPU the encoder spent.
// --threads: a run per number of collector threads (ringcap record --threads=N; default 1). --modes:
// the fixed total rate, the maximum rate, or both (default). --json: one JSON object per run, per
// line, on stdout instead of the table (the headings go to stderr). punted (punted_writes): data
// writes io_uring handed to a worker thread (io_uring:io_uring_queue_async_work for WRITE and
// WRITE_FIXED, counted on every CPU during the run; -1 where the tracepoint cannot be read).
//
// For each output directory (default /tmp, the disk, and /dev/shm, tmpfs, which takes O_DIRECT since
// Linux 6.6 and shows the collector without the device), in the same run:
//   limits  memcpy GB/s copying 8 KiB records from a 256 MiB source into 1 MiB 4 KiB-aligned buffers;
//           write GB/s of sequential 1 MiB writes to a new file there (O_DIRECT where the filesystem
//           takes it, as the collector's output; registered buffers), the best of 1, 4, 16, 64 in
//           flight, and again at that depth right before each ring count (cloud disks vary a lot)
//   runs    for each ring count, each in a child process (clean RSS and rusage):
//           fixed  --total-mb MB/s offered, split evenly over the rings (samples that find a ring full
//                  are dropped and counted, as the kernel does)
//           max    the producer fills the rings whenever there is room: the collector's drain rate is
//                  the limit
//           and checks each output with `perf report --stats` (SAMPLE and LOST_SAMPLES counts must
//           equal the collector's).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <iostream>
#include <linux/magic.h>
#include <linux/perf_event.h>
#include <liburing.h>
#include <sstream>
#include <string>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "ringcap/recorder.hpp"
#include "ringcap/sys.hpp"
#include "testkit/punt_counter.hpp"
#include "testkit/synthetic_source.hpp"
#include "synth_limits.hpp"

using namespace ringcap;
using namespace synthbench;

namespace {

struct Args {
    std::vector<unsigned> rings{1, 16, 64, 256, 512};
    double total_mb = 1024;  // 256 rings x 4 MB/s
    double duration = 2;
    uint32_t record_bytes = 8192;
    size_t pages = 128;
    size_t staging_buffers = 0;  // 0 = the collector's default
    size_t staging_kb = 1024;
    std::vector<std::string> dirs{"/tmp", "/dev/shm"};
    std::string perf = "perf";
    bool keep = false;
    std::vector<unsigned> threads{1};
    bool fixed = true, max = true;  // --modes fixed,max
    bool json = false;
    int compress = 0;     // --compress LEVEL: ringcap record -z LEVEL
    std::string backend;  // "", uring or epoll (ringcap record --backend)
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "ringcap_synthbench: %s\nusage: ringcap_synthbench [--rings 1,16,64,256,512] [--total-mb 1024] "
                 "[--duration 2] [--record-bytes 8192] [--pages 128] [--staging-buffers N] [--staging-kb 1024] [--dirs DIR,...] [--threads 1,2,4] [--modes fixed,max] [--compress LEVEL] [--json] [--perf PERF|none] [--keep]\n",
                 why);
    std::exit(2);
}

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string k = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value for " + k).c_str());
            return argv[++i];
        };
        if (k == "--rings") {
            a.rings.clear();
            std::stringstream ss(val());
            for (std::string t; std::getline(ss, t, ',');) a.rings.push_back(unsigned(std::stoul(t)));
        } else if (k == "--total-mb") a.total_mb = std::stod(val());
        else if (k == "--duration") a.duration = std::stod(val());
        else if (k == "--record-bytes") a.record_bytes = uint32_t(std::stoul(val()));
        else if (k == "--pages") a.pages = std::stoul(val());
        else if (k == "--staging-buffers") a.staging_buffers = std::stoul(val());
        else if (k == "--staging-kb") a.staging_kb = std::stoul(val());
        else if (k == "--dirs") {
            a.dirs.clear();
            std::stringstream ss(val());
            for (std::string t; std::getline(ss, t, ',');) a.dirs.push_back(t);
        }
        else if (k == "--perf") a.perf = val();
        else if (k == "--keep") a.keep = true;
        else if (k == "--threads") {
            a.threads.clear();
            std::stringstream ss(val());
            for (std::string t; std::getline(ss, t, ',');) a.threads.push_back(unsigned(std::stoul(t)));
        } else if (k == "--modes") {
            const std::string v = val();
            a.fixed = v.find("fixed") != std::string::npos;
            a.max = v.find("max") != std::string::npos;
            if (!a.fixed && !a.max) usage("--modes takes fixed, max or fixed,max");
        }
        else if (k == "--json") a.json = true;
        else if (k == "--compress") a.compress = std::stoi(val());
        else if (k == "--backend") a.backend = val();
        else usage(("unknown option " + k).c_str());
    }
    return a;
}

// Data writes io_uring hands to a worker thread, on every CPU: io_uring:io_uring_queue_async_work
// for WRITE and WRITE_FIXED, counted (not sampled) while the run lasts.
class PuntCounter {
public:
    PuntCounter() {
        try {
            std::string why;
            for (int cpu : online_cpus()) {
                UniqueFd fd = open_punt_counter(cpu, true, &why);
                if (!fd) {
                    fds_.clear();
                    return;
                }
                fds_.push_back(std::move(fd));
            }
        } catch (const Error&) {
            fds_.clear();  // the filter refused: not counted (-1)
        }
    }
    void start() {  // counts from zero for each run
        for (auto& fd : fds_) {
            ioctl(fd.get(), PERF_EVENT_IOC_RESET, 0);
            ioctl(fd.get(), PERF_EVENT_IOC_ENABLE, 0);
        }
    }
    long long stop() {
        if (fds_.empty()) return -1;
        long long n = 0;
        for (auto& fd : fds_) {
            ioctl(fd.get(), PERF_EVENT_IOC_DISABLE, 0);
            uint64_t v = 0;
            if (read(fd.get(), &v, sizeof v) == ssize_t(sizeof v)) n += (long long)v;
        }
        return n;
    }

private:
    std::vector<UniqueFd> fds_;
};

struct ChildResult {
    int exit_code = -1;
    double seconds = 0, reader_cpu = 0;  // reader_cpu: the collector threads'
    uint64_t offered = 0, samples = 0, dropped = 0, file_bytes = 0, ring_bytes = 0, staging_bytes = 0;
    uint64_t cqes = 0, writes = 0, staging_full = 0;
    uint64_t compress_in = 0, compress_out = 0;  // -z
    double compress_cpu = 0;
    bool o_direct = false;
    // Per-ring fairness: samples each ring delivered and samples each ring lost (PERF_RECORD_LOST in
    // its stream), min / median / max over the rings, and the mean of the first and the last eighth
    // of the rings (a sweep that always starts at ring 0 favours the first ones).
    uint64_t samples_min = 0, samples_med = 0, samples_max = 0;
    uint64_t lost_min = 0, lost_med = 0, lost_max = 0;
    double samples_first8 = 0, samples_last8 = 0, lost_first8 = 0, lost_last8 = 0;
};

// min, median, max, mean of the first and of the last eighth of v (in ring order).
void spread(const std::vector<uint64_t>& v, uint64_t& mn, uint64_t& med, uint64_t& mx, double& first8, double& last8) {
    if (v.empty()) return;
    std::vector<uint64_t> s = v;
    std::sort(s.begin(), s.end());
    mn = s.front();
    med = s[s.size() / 2];
    mx = s.back();
    const size_t k = std::max<size_t>(1, v.size() / 8);
    double a = 0, b = 0;
    for (size_t i = 0; i < k; ++i) a += double(v[i]), b += double(v[v.size() - 1 - i]);
    first8 = a / double(k);
    last8 = b / double(k);
}

struct Row {
    unsigned rings, threads;
    double mb_per_ring;  // 0 = max
    ChildResult r;
    double maxrss_mb = 0, process_cpu = 0;
    long long punted = -1;
    std::string perf_check;
};

ChildResult run_child(const Args& a, unsigned rings, unsigned threads, double mb_per_ring, const std::string& out,
                      const std::string& log_path, double* maxrss_mb, double* process_cpu) {
    int pipefd[2];
    if (pipe(pipefd) != 0) std::exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        SyntheticConfig cfg;
        cfg.rings = rings;
        cfg.mb_per_ring = mb_per_ring;
        cfg.record_bytes = a.record_bytes;
        cfg.varied_stacks = a.compress > 0;
        SyntheticSource source(cfg);
        RecordOptions o;
        o.mmap_pages = a.pages;
        o.staging_buffers = a.staging_buffers;
        o.staging_buffer_bytes = a.staging_kb * 1024;
        o.duration_s = a.duration;
        o.output = out;
        o.build_ids = false;
        o.back_pressure = false;  // the collector's own limits, measured: nothing lowered
        o.threads = std::to_string(threads);
        o.compression_level = a.compress;
        if (a.backend == "uring") o.backend = Backend::Uring;
        if (a.backend == "epoll") o.backend = Backend::Epoll;
        o.argv = {"ringcap_synthbench", "--rings", std::to_string(rings)};
        std::ostringstream log;
        RecordSummary sum;
        ChildResult res;
        try {
            res.exit_code = run_record(o, source, log, &sum);
        } catch (const std::exception& e) {
            log << "ringcap_synthbench: " << e.what() << "\n";
            res.exit_code = 2;
        }
        for (const auto& c : sum.collectors) res.reader_cpu += c.cpu_seconds;
        res.seconds = sum.seconds;
        res.offered = source.offered();
        res.samples = sum.total.samples;
        res.dropped = sum.kernel_lost;
        res.file_bytes = sum.file_bytes;
        res.ring_bytes = sum.ring_bytes;
        res.staging_bytes = sum.staging_bytes;
        res.cqes = sum.cqes;
        res.writes = sum.writes;
        res.staging_full = sum.total.partial_drains;
        res.o_direct = sum.o_direct;
        res.compress_in = sum.compress_input;
        res.compress_out = sum.compressed_bytes;
        res.compress_cpu = sum.compress_cpu_seconds;
        std::vector<uint64_t> per_samples, per_lost;
        for (const auto& c : sum.cpus) {
            per_samples.push_back(c.ring.samples);
            per_lost.push_back(c.ring.lost);
        }
        spread(per_samples, res.samples_min, res.samples_med, res.samples_max, res.samples_first8, res.samples_last8);
        spread(per_lost, res.lost_min, res.lost_med, res.lost_max, res.lost_first8, res.lost_last8);
        if (FILE* f = std::fopen(log_path.c_str(), "w")) {
            std::fputs(log.str().c_str(), f);
            std::fclose(f);
        }
        [[maybe_unused]] ssize_t n = write(pipefd[1], &res, sizeof res);
        _exit(0);
    }
    close(pipefd[1]);
    ChildResult res;
    if (read(pipefd[0], &res, sizeof res) != ssize_t(sizeof res)) res.exit_code = -1;
    close(pipefd[0]);
    int status = 0;
    rusage ru{};
    wait4(pid, &status, 0, &ru);
    *maxrss_mb = double(ru.ru_maxrss) / 1024.0;
    *process_cpu = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                   double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    return res;
}

// perf report --stats must read the file and count what the collector counted: the samples, and the
// drops (LOST_SAMPLES, summed per event).
std::string perf_check(const Args& a, const std::string& file, uint64_t samples, uint64_t dropped) {
    if (a.perf == "none") return "-";
    std::string cmd = a.perf + " report --stats -i '" + file + "' 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return "popen failed";
    char line[512];
    long long perf_samples = -1, perf_lost = 0;
    bool failed = false, per_event = false;
    while (std::fgets(line, sizeof line, p)) {
        const std::string l = line;
        if (l.find(" stats:") != std::string::npos) per_event = l.rfind("Aggregated", 0) != 0;
        if (auto k = l.find("SAMPLE events:"); k != std::string::npos && perf_samples < 0)
            perf_samples = std::atoll(line + k + 14);
        if (auto k = l.find("LOST_SAMPLES events:"); k != std::string::npos && per_event)
            perf_lost += std::atoll(line + k + 20);
        if (l.find("failed to process") != std::string::npos || l.rfind("Error", 0) == 0) failed = true;
    }
    const int rc = pclose(p);
    if (rc != 0 || failed) return "perf failed";
    if (perf_samples < 0) perf_samples = 0;
    if (uint64_t(perf_samples) != samples) return "MISMATCH samples perf=" + std::to_string(perf_samples);
    if (uint64_t(perf_lost) != dropped) return "MISMATCH lost perf=" + std::to_string(perf_lost);
    return "ok";
}

void remove_output(const std::string& base) {
    for (const char* suffix : {".data", ".data.old", ".log"}) unlink((base + suffix).c_str());
}

// One filesystem: its limits, then the runs. Returns the number of failed runs.
int sweep(const Args& a, const std::string& dir, double mc) {
    std::string why;
    bool direct = false;
    // The write limit: the best of a few queue depths (the collector keeps up to one write per
    // staging buffer in flight). Cloud disks vary a lot over time, so it is measured again (at that
    // depth, for 1 s) right before each ring count and each row is a fraction of that figure.
    double best = -1;
    unsigned best_depth = 16;
    for (unsigned depth : {1u, 4u, 16u, 64u}) {
        why.clear();
        const double g = write_gbps(dir, depth, 1.0, &direct, &why);
        if (g > best) best = g, best_depth = depth;
        if (g < 0) break;
    }
    if (best < 0) {
        std::fprintf(stderr, "%s: cannot measure the write limit: %s\n", dir.c_str(), why.c_str());
        return 1;
    }
    std::fprintf(a.json ? stderr : stdout, "\n## output %s: %s writes, best %.2f GB/s (%u x 1 MiB in flight); memcpy %.2f GB/s\n", dir.c_str(),
                direct ? "O_DIRECT" : "buffered", best, best_depth, mc);
    if (!a.json)
        std::printf("%5s %3s %8s %6s %9s %9s %6s %6s %7s %9s %6s %8s %7s %7s %8s %8s %6s  %s\n", "rings", "thr", "MB/s/rng",
                    "wlim", "offer_MB/s", "write_MB/s", "%wlim", "%mcpy", "drop%", "dropped", "cpu_s", "cpu_s/GB",
                    "rss_MB", "mem_MB", "rss-mem", "stg_full", "punted", "perf");
    std::fflush(stdout);
    int failures = 0;
    PuntCounter punts;
    for (unsigned n : a.rings) {
        why.clear();
        const double wlim = write_gbps(dir, best_depth, 1.0, &direct, &why);
        std::vector<std::pair<unsigned, double>> runs;  // (collectors, MB/s per ring; 0 = max)
        for (unsigned t : a.threads) {
            if (a.fixed) runs.emplace_back(t, a.total_mb / double(n));
            if (a.max) runs.emplace_back(t, 0.0);
        }
        for (const auto& [t, per] : runs) {
            Row row{n, t, per, {}, 0, 0, -1, {}};
            const std::string out = dir + "/ringcap-synth-" + std::to_string(n) + "-" + std::to_string(t) +
                                    (per > 0 ? "-fixed" : "-max");
            remove_output(out);
            punts.start();
            row.r = run_child(a, n, t, per, out + ".data", out + ".log", &row.maxrss_mb, &row.process_cpu);
            row.punted = punts.stop();
            const ChildResult& r = row.r;
            if (r.exit_code != 0) {
                std::fprintf(a.json ? stderr : stdout, "%5u %3u run failed (exit %d), see %s.log\n", n, t, r.exit_code, out.c_str());
                ++failures;
                continue;
            }
            row.perf_check = perf_check(a, out + ".data", r.samples, r.dropped);
            if (row.perf_check != "ok" && row.perf_check != "-") ++failures;
            const double rec = double(a.record_bytes & ~7u);
            const double offer_mbs = double(r.offered) * rec / r.seconds / 1e6;
            const double write_mbs = double(r.file_bytes) / r.seconds / 1e6;
            const double mem_mb = double(r.ring_bytes + r.staging_bytes) / double(1 << 20);
            const double gb = double(r.file_bytes) / 1e9;
            const double drop_pct = r.offered ? 100.0 * double(r.dropped) / double(r.offered) : 0.0;
            if (a.json) {
                std::printf("{\"dir\":\"%s\",\"rings\":%u,\"threads\":%u,\"mode\":\"%s\",\"offered_mbps\":%.1f,"
                            "\"written_mbps\":%.1f,\"write_limit_mbps\":%.1f,\"o_direct\":%s,\"dropped_pct\":%.4f,"
                            "\"dropped\":%llu,\"collector_cpu_s\":%.3f,\"collector_cpu_s_per_gb\":%.3f,"
                            "\"punted_writes\":%lld,\"rss_mb\":%.1f,\"ring_staging_mb\":%.1f,\"perf_check\":\"%s\","
                            "\"compression_level\":%d,\"compressed_input_mbps\":%.1f,\"compression_ratio\":%.2f,"
                            "\"compress_cpu_s\":%.3f}\n",
                            dir.c_str(), n, t, per > 0 ? "fixed" : "max", offer_mbs, write_mbs, wlim * 1e3,
                            r.o_direct ? "true" : "false", drop_pct, (unsigned long long)r.dropped, r.reader_cpu,
                            gb > 0 ? r.reader_cpu / gb : 0.0, row.punted, row.maxrss_mb, mem_mb, row.perf_check.c_str(),
                            a.compress, double(r.compress_in) / r.seconds / 1e6,
                            r.compress_out ? double(r.compress_in) / double(r.compress_out) : 0.0, r.compress_cpu);
                std::fflush(stdout);
                if (!a.keep) remove_output(out);
                continue;
            }
            char rate[16];
            std::snprintf(rate, sizeof rate, per > 0 ? "%.2f" : "max", per);
            std::printf("%5u %3u %8s %6.2f %9.0f %9.0f %5.0f%% %5.0f%% %6.2f%% %9llu %6.2f %8.2f %7.1f %7.1f %8.1f %8llu %6lld  %s\n",
                        n, t, rate, wlim, offer_mbs, write_mbs, wlim > 0 ? 100.0 * write_mbs / 1e3 / wlim : 0.0,
                        100.0 * write_mbs / 1e3 / mc, drop_pct, (unsigned long long)r.dropped, r.reader_cpu,
                        gb > 0 ? r.reader_cpu / gb : 0.0, row.maxrss_mb, mem_mb, row.maxrss_mb - mem_mb,
                        (unsigned long long)r.staging_full, row.punted, row.perf_check.c_str());
            if (a.compress > 0)
                std::printf("      -z %d: compressed %.0f MB/s of records (%.1f MB in %.2f s) at %.1fx, encoder CPU %.2f s "
                            "(%.0f MB per CPU second); the other columns count the compressed file\n",
                            a.compress, double(r.compress_in) / r.seconds / 1e6, double(r.compress_in) / 1e6, r.seconds,
                            r.compress_out ? double(r.compress_in) / double(r.compress_out) : 0.0, r.compress_cpu,
                            r.compress_cpu > 0 ? double(r.compress_in) / 1e6 / r.compress_cpu : 0.0);
            if (n > 1)
                std::printf("      per ring: samples min/med/max %llu/%llu/%llu, first/last 1/8 %.0f/%.0f; "
                            "lost min/med/max %llu/%llu/%llu, first/last 1/8 %.0f/%.0f\n",
                            (unsigned long long)r.samples_min, (unsigned long long)r.samples_med,
                            (unsigned long long)r.samples_max, r.samples_first8, r.samples_last8,
                            (unsigned long long)r.lost_min, (unsigned long long)r.lost_med,
                            (unsigned long long)r.lost_max, r.lost_first8, r.lost_last8);
            std::fflush(stdout);
            if (!a.keep) remove_output(out);
        }
    }
    return failures;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse(argc, argv);
    utsname u{};
    uname(&u);
    FILE* info = a.json ? stderr : stdout;  // --json: stdout holds only the JSON lines
    std::fprintf(info, "# ringcap synthetic many-ring benchmark: %s %s, %ld CPUs, %.1f GiB RAM\n", u.sysname, u.release,
                sysconf(_SC_NPROCESSORS_ONLN),
                double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / double(1ull << 30));
    std::fprintf(info, "# %u-byte samples, %zu-page rings, %.1f s per run, %.0f MB/s in all at the fixed rate; one producer "
                "thread\n",
                a.record_bytes, a.pages, a.duration, a.total_mb);
    const double mc = memcpy_gbps();
    int failures = 0;
    for (const auto& dir : a.dirs) failures += sweep(a, dir, mc);
    std::fprintf(info, "\n# wlim: write limit (GB/s) measured just before the row; offer/write_MB/s: what the producer "
                "offered and the collector wrote, per second;\n# thr: collector threads (--threads); cpu_s: CPU of the collector threads; mem_MB: ring + "
                "staging memory; rss-mem: peak RSS beyond it; stg_full: drains cut short by full staging;\n# punted: data "
                "writes io_uring queued to a worker thread (-1: tracepoint unavailable)\n");
    return failures ? 1 : 0;
}
