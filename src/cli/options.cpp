#include "ringcap/options.hpp"
#include "ringcap/collector_thread.hpp"
#include "ringcap/staging.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ringcap {

const char* const kRecordUsage =
    "usage: ringcap record [options] [-- COMMAND [ARGS...]]\n"
    "  -a, --all-cpus           record on every online CPU\n"
    "  -C, --cpu LIST           record on these CPUs (e.g. 0,2-3)\n"
    "  -p, --pid PID,...        record these processes (all their threads, and children they start)\n"
    "  -t, --tid TID,...        record these threads\n"
    "  -G, --cgroup NAME[,...]  with -a/-C: only the tasks of cgroup NAME (relative to the cgroup v2\n"
    "                           mount, as /proc/PID/cgroup shows it); a list applies to the events\n"
    "                           in -e order, an empty entry leaves that event unfiltered\n"
    "  -e, --event LIST         events, comma separated (default cpu-clock:ppp)\n"
    "  -F, --freq HZ            sample at HZ per event and CPU (default 4000)\n"
    "  -c, --count PERIOD       sample every PERIOD events instead of -F\n"
    "  -g                       frame-pointer call stacks (same as --call-graph fp)\n"
    "      --call-graph MODE    fp, or dwarf[,SIZE] (user stack copy of SIZE bytes, default 8192)\n"
    "      --max-stack N        keep at most N frames per call stack\n"
    "  -m, --mmap-pages N       data pages per CPU ring, a power of two, or a size like 2M (default\n"
    "                           128; as root or with CAP_IPC_LOCK up to 8192 (32 MiB), at most 256 MiB\n"
    "                           for all rings)\n"
    "  -o, --output FILE        output file (default perf.data; an existing one becomes FILE.old);\n"
    "                           - writes perf's pipe format to stdout (ringcap record -a -o - | perf report -i -)\n"
    "      --pipe-backlog SIZE  with -o -: stop when more than SIZE (K/M/G) wait for the reader\n"
    "                           (default: a quarter of the available memory, at most 1G)\n"
    "      --duration SECONDS   stop after SECONDS\n"
    "      --wakeup-events N    wake the collector every N samples\n"
    "      --wakeup-watermark B wake the collector every B bytes (default: a quarter of the ring)\n"
    "  -r, --realtime PRIO      run the collectors at SCHED_FIFO priority PRIO (as perf record -r); by\n"
    "                           default they run at SCHED_FIFO 1 where allowed (root or CAP_SYS_NICE),\n"
    "                           unless --collector-nice is given or ringcap runs niced or real-time\n"
    "      --no-realtime        the collectors at normal priority (--collector-nice) instead\n"
    "      --collector-nice N   nice value of the encoder and pipe streamer threads, and of the\n"
    "                           collectors when not real-time, -20..19 (default -5 when allowed: root\n"
    "                           or CAP_SYS_NICE, and unless ringcap was started with a nice value of\n"
    "                           its own, which they keep)\n"
    "      --backend uring|epoll  event loop (default: io_uring, epoll if io_uring is unavailable)\n"
    "      --threads[=SPEC]     collector threads: a number, or one per cpu (the default of --threads\n"
    "                           alone), core, package or numa node; default one per cpu, at most 16\n"
    "      --no-direct          buffered writes instead of O_DIRECT (more CPU, no disk I/O while\n"
    "                           recording until the page cache writes back; see ringcap-record(1))\n"
    "  -z, --compression-level[=N]  compress the data with zstd at level N (1 fastest, the default; up\n"
    "                           to 22) into PERF_RECORD_COMPRESSED records, as perf record -z\n"
    "  -B, --no-buildid         leave out the BUILD_ID feature (the build-ids of the kernel and of the\n"
    "                           ELF files that samples hit)\n"
    "      --buildid-all        list (and cache) every ELF file mapped executable, not only those hit\n"
    "  -N, --no-buildid-cache   do not add those files to perf's build-id cache ($HOME/.debug)\n"
    "      --buildid-cache-max TOTAL[,FILE]  copy at most TOTAL bytes into the cache per record and\n"
    "                           no file bigger than FILE (default 2G,512M; hard links are free)\n"
    "      --no-cut-samples     under back-pressure, never cut user stacks (a lower rate, then drops)\n"
    "      --switch-output[=signal|SIZE|TIME]  rotate: finish the file and start a new one on SIGUSR2\n"
    "                           (the default), when it holds SIZE (e.g. 500M) or every TIME (30s, 5m,\n"
    "                           1h, 1d); files are named FILE.YYYYmmddHHMMSScc, each a whole perf.data\n"
    "      --switch-max-files N keep only the newest N rotated files\n"
    "      --max-size SIZE      stop before the file exceeds SIZE (e.g. 2G); exit status 0\n"
    "      --json PATH|-        also write the summary as JSON (schema in ringcap-record(1)), on every exit\n"
    "      --flight-recorder=DURATION  keep only the newest DURATION (30s, 5m) in memory, compressed,\n"
    "                           and write it as a file of its own (named as --switch-output names\n"
    "                           files) on SIGUSR2, the control command snapshot, and at the end\n"
    "      --flight-recorder-size SIZE  the window's memory bound (default: an eighth of the available\n"
    "                           memory, at most 4G); the window shrinks when it is reached\n"
    "      --flight-recorder-on-failure  with -- COMMAND: the dump at the end only if the command failed\n"
    "      --control=fifo:CTL[,ACK] | fd:CTL[,ACK]  commands on a FIFO or fd, as perf record's: snapshot,\n"
    "                           stop, ping, enable, disable; each acknowledged on ACK once done\n"
    "  -q, --quiet              print only errors (no status line, no summary)\n"
    "  -v, --verbose            print the setup (backend, O_DIRECT, sizes)\n"
    "  -h, --help               print this help\n"
    "Internal knobs for tests and benchmarks: --staging-buffers N, --staging-kb KB, --cq-entries N,\n"
    "--no-stack-trim (dwarf stacks copied whole, not trimmed to what the kernel filled),\n"
    "--no-back-pressure (nothing lowered when the output falls behind: the kernel drops instead).\n"
    "Without -a/-C, -- COMMAND records the command and its children (per task); with -a it records\n"
    "system-wide while the command runs. SIGINT, SIGTERM or SIGHUP stop the record cleanly.\n";

namespace {

[[noreturn]] void bad(const std::string& msg) { throw Error(msg, 2); }

uint64_t parse_u64(const std::string& flag, const std::string& v) {
    if (v.empty() || v[0] == '-' || v[0] == '+') bad(flag + " needs a positive integer, got '" + v + "'");
    errno = 0;
    char* end = nullptr;
    unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (errno || !end || *end) bad(flag + " needs a positive integer, got '" + v + "'");
    return n;
}

size_t parse_pages(const std::string& v) {
    // perf accepts a page count or a size with a B/K/M/G suffix.
    uint64_t pages;
    char suffix = v.empty() ? 0 : char(std::toupper(static_cast<unsigned char>(v.back())));
    if (suffix == 'B' || suffix == 'K' || suffix == 'M' || suffix == 'G') {
        uint64_t n = parse_u64("-m", v.substr(0, v.size() - 1));
        uint64_t mult = suffix == 'B' ? 1 : suffix == 'K' ? 1ull << 10 : suffix == 'M' ? 1ull << 20 : 1ull << 30;
        if (n > (1ull << 40) / mult) bad("-m " + v + " is too large");
        pages = n * mult / page_size();
    } else {
        pages = parse_u64("-m", v);
    }
    if (pages == 0 || (pages & (pages - 1)) != 0)
        bad("-m " + v + ": the ring needs a power-of-two number of data pages (e.g. 64, 128, 1024)");
    if (pages > (1u << 20)) bad("-m " + v + ": at most 1048576 pages (4 GiB) per CPU ring");
    return size_t(pages);
}

}  // namespace

uint64_t parse_size(const std::string& flag, const std::string& v) {
    const char last = v.empty() ? 0 : char(std::toupper(static_cast<unsigned char>(v.back())));
    uint64_t mult = 1;
    std::string digits = v;
    if (last == 'B' || last == 'K' || last == 'M' || last == 'G' || last == 'T') {
        mult = last == 'B' ? 1 : last == 'K' ? 1ull << 10 : last == 'M' ? 1ull << 20 : last == 'G' ? 1ull << 30 : 1ull << 40;
        digits = v.substr(0, v.size() - 1);
    }
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 15)
        bad(flag + " " + v + ": give a size such as 100M or 2G (B, K, M, G, T)");
    const uint64_t n = parse_u64(flag, digits);
    if (n == 0 || n > (1ull << 50) / mult) bad(flag + " " + v + ": give a size such as 100M or 2G");
    return n * mult;
}

double parse_time(const std::string& flag, const std::string& v) {
    const char last = v.empty() ? 0 : v.back();
    const double mult = last == 's' ? 1 : last == 'm' ? 60 : last == 'h' ? 3600 : last == 'd' ? 86400 : 0;
    const std::string digits = v.substr(0, v.empty() ? 0 : v.size() - 1);
    if (mult == 0 || digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9)
        bad(flag + " " + v + ": give a time in whole seconds, minutes, hours or days (30s, 5m, 1h, 1d)");
    const uint64_t n = parse_u64(flag, digits);
    if (n == 0 || n > 365 * 86400) bad(flag + " " + v + ": give a time such as 30s, 5m, 1h or 1d");
    return double(n) * mult;
}

RecordOptions parse_record_args(const std::vector<std::string>& args) {
    RecordOptions o;
    bool have_F = false, have_c = false;
    std::optional<std::string> events;  // perf's default without -e
    for (size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        std::string inline_val;
        bool has_inline = false;
        if (a.rfind("--", 0) == 0 && a.size() > 2) {
            auto eq = a.find('=');
            if (eq != std::string::npos) {
                inline_val = a.substr(eq + 1);
                a = a.substr(0, eq);
                has_inline = true;
            }
        } else if (a.size() > 2 && a[0] == '-' && a[1] != '-') {
            // -F4000 style
            inline_val = a.substr(2);
            a = a.substr(0, 2);
            has_inline = true;
        }
        auto value = [&]() -> std::string {
            if (has_inline) return inline_val;
            if (i + 1 >= args.size()) bad(a + " needs a value");
            return args[++i];
        };
        auto no_value = [&] {
            if (has_inline) bad("unknown option '" + args[i] + "'");
        };
        if (a == "--") {
            o.command.assign(args.begin() + long(i) + 1, args.end());
            if (o.command.empty()) bad("'--' must be followed by a command");
            break;
        } else if (a == "-a" || a == "--all-cpus") {
            no_value();
            o.all_cpus = true;
        } else if (a == "-C" || a == "--cpu") {
            std::string v = value();
            auto cpus = parse_cpu_list(v);
            if (!cpus || cpus->empty()) bad("-C '" + v + "' is not a CPU list (e.g. 0,2-3)");
            o.cpus = *cpus;
        } else if (a == "-p" || a == "--pid" || a == "-t" || a == "--tid") {
            std::string v = value();
            auto& list = (a == "-p" || a == "--pid") ? o.pids : o.tids;
            size_t pos = 0;
            while (true) {
                size_t comma = v.find(',', pos);
                std::string item = v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
                uint64_t id = parse_u64(a, item);
                if (id == 0 || id > 0x3fffffff) bad(a + " " + item + " is not a process or thread id");
                list.push_back(int(id));
                if (comma == std::string::npos) break;
                pos = comma + 1;
            }
        } else if (a == "-G" || a == "--cgroup") {
            // perf's -G: a list is matched to the events in order; repeated -G continue that list.
            std::string v = value();
            size_t pos = 0;
            while (true) {
                size_t comma = v.find(',', pos);
                o.cgroups.push_back(v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
                if (comma == std::string::npos) break;
                pos = comma + 1;
            }
        } else if (a == "-r" || a == "--realtime") {
            uint64_t n = parse_u64(a, value());
            if (n < 1 || n > 99) bad("-r needs a SCHED_FIFO priority between 1 and 99");
            o.realtime_priority = int(n);
            o.realtime_given = true;
        } else if (a == "--no-realtime") {
            no_value();
            o.realtime_priority = 0;
            o.realtime_given = false;
        } else if (a == "--collector-nice") {
            const std::string v = value();
            errno = 0;
            char* end = nullptr;
            const long n = std::strtol(v.c_str(), &end, 10);
            if (v.empty() || errno || *end || n < -20 || n > 19)
                bad("--collector-nice needs a nice value between -20 and 19, got '" + v + "'");
            o.collector_nice = int(n);
            o.collector_nice_given = true;
        } else if (a == "--threads") {
            // perf's flag: --threads alone is one collector per CPU. perf takes the value only after
            // '='; a separate value that can only be a spec (a number, cpu, core, package, numa) is
            // taken too, so `--threads 4` does not try to run a command named 4.
            if (has_inline) o.threads = inline_val;
            else if (i + 1 < args.size() && valid_threads_spec(args[i + 1])) o.threads = args[++i];
            else o.threads = "cpu";
            if (!valid_threads_spec(o.threads))
                bad("--threads takes a number of collectors, or cpu, core, package or numa; got '" + o.threads + "'");
        } else if (a == "-z" || a == "--compression-level") {
            // perf's flag, value optional (attached only: -z3, --compression-level=3).
            o.compression_level = 1;
            if (has_inline) {
                const uint64_t n = parse_u64(a, inline_val);
                if (n < 1 || n > 22) bad(a + ": the zstd level must be between 1 (fastest, the default) and 22");
                o.compression_level = int(n);
            }
        } else if (a == "--backend") {
            std::string v = value();
            if (v == "uring" || v == "io_uring") o.backend = Backend::Uring;
            else if (v == "epoll") o.backend = Backend::Epoll;
            else bad("--backend must be uring or epoll, got '" + v + "'");
        } else if (a == "-g") {
            no_value();
            o.sampling.call_graph = CallGraph::FramePointer;
        } else if (a == "--call-graph") {
            std::string v = value();
            if (v == "fp") {
                o.sampling.call_graph = CallGraph::FramePointer;
            } else if (v.rfind("dwarf", 0) == 0 && (v.size() == 5 || v[5] == ',')) {
                o.sampling.call_graph = CallGraph::Dwarf;
                if (v.size() > 6) {
                    uint64_t n = parse_u64("--call-graph dwarf,SIZE", v.substr(6));
                    // The kernel takes at most 65528 bytes (the record size is u16) in multiples of 8.
                    if (n == 0 || n > 65528 || n % 8 != 0)
                        bad("--call-graph dwarf,SIZE: SIZE must be a multiple of 8 between 8 and 65528");
                    o.sampling.stack_size = uint32_t(n);
                }
            } else {
                bad("--call-graph must be fp or dwarf[,SIZE], got '" + v + "' (lbr needs hardware this tool "
                    "does not drive)");
            }
        } else if (a == "--max-stack") {
            uint64_t n = parse_u64("--max-stack", value());
            if (n == 0 || n > 65535) bad("--max-stack must be between 1 and 65535");
            o.sampling.max_stack = uint16_t(n);
        } else if (a == "--no-buildid" || a == "-B") {
            no_value();
            o.build_ids = false;
            o.build_id_cache = false;  // as perf: nothing to cache without build-ids
        } else if (a == "-q" || a == "--quiet") {
            no_value();
            o.quiet = true;
        } else if (a == "--switch-output") {
            // perf's flag: the value only after '=' (a separate word is the command).
            auto& so = o.switch_output;
            const std::string v = has_inline ? inline_val : "signal";
            const char last = v.empty() ? 0 : v.back();
            if (v == "signal") {
                so.mode = SwitchOutput::Mode::Signal;
            } else if (last == 's' || last == 'm' || last == 'h' || last == 'd') {
                so.mode = SwitchOutput::Mode::Time;
                so.seconds = parse_time(a, v);
            } else if (!v.empty() && std::isdigit(static_cast<unsigned char>(v.front()))) {
                so.mode = SwitchOutput::Mode::Size;
                so.bytes = parse_size(a, v);
            } else {
                bad("--switch-output takes signal, a size (500M) or a time (30s, 5m, 1h), got '" + v + "'");
            }
        } else if (a == "--switch-max-files") {
            const uint64_t n = parse_u64(a, value());
            if (n == 0 || n > 1000000) bad("--switch-max-files must be between 1 and 1000000");
            o.switch_output.max_files = size_t(n);
        } else if (a == "--max-size") {
            o.max_size = parse_size(a, value());
        } else if (a == "--flight-recorder") {
            // The value only after '=', as --switch-output's.
            if (!has_inline) bad("--flight-recorder needs a duration: --flight-recorder=30s");
            o.flight_recorder_s = parse_time(a, inline_val);
        } else if (a == "--flight-recorder-size") {
            o.flight_recorder_size = parse_size(a, value());
            if (o.flight_recorder_size < (16u << 20)) bad("--flight-recorder-size: at least 16M");
        } else if (a == "--flight-recorder-on-failure") {
            no_value();
            o.flight_recorder_on_failure = true;
        } else if (a == "--control") {
            o.control = value();
            if (o.control.rfind("fifo:", 0) != 0 && o.control.rfind("fd:", 0) != 0)
                bad("--control takes fifo:CTL[,ACK] or fd:CTL[,ACK], got '" + o.control + "'");
        } else if (a == "--json") {
            o.json = value();
            if (o.json.empty()) bad("--json needs a path, or - for stdout");
        } else if (a == "--pipe-backlog") {
            o.pipe_backlog = parse_size(a, value());
            if (o.pipe_backlog < (1u << 20)) bad("--pipe-backlog: at least 1M");
        } else if (a == "--no-buildid-cache" || a == "-N") {
            no_value();
            o.build_id_cache = false;
        } else if (a == "--buildid-all") {
            no_value();
            o.buildid_all = true;
        } else if (a == "--buildid-cache-max") {
            const std::string v = value();
            const auto comma = v.find(',');
            o.buildid_cache_max = parse_size(a, v.substr(0, comma));
            if (comma != std::string::npos) o.buildid_cache_max_file = parse_size(a, v.substr(comma + 1));
        } else if (a == "-e" || a == "--event") {
            events = value();
        } else if (a == "-F" || a == "--freq") {
            std::string v = value();
            if (v == "max") {
                o.sampling.freq = uint64_t(read_sysctl("kernel/perf_event_max_sample_rate").value_or(1000));
            } else {
                o.sampling.freq = parse_u64("-F", v);
                if (o.sampling.freq == 0) bad("-F 0: the frequency must be at least 1 Hz");
            }
            have_F = true;
            o.freq_given = true;
        } else if (a == "-c" || a == "--count") {
            o.sampling.period = parse_u64("-c", value());
            if (o.sampling.period == 0) bad("-c 0: the period must be at least 1");
            o.sampling.use_freq = false;
            have_c = true;
        } else if (a == "-m" || a == "--mmap-pages") {
            o.mmap_pages = parse_pages(value());
        } else if (a == "-o" || a == "--output") {
            o.output = value();
            if (o.output.empty()) bad("-o needs a file name");
        } else if (a == "--duration") {
            std::string v = value();
            char* end = nullptr;
            errno = 0;
            double d = std::strtod(v.c_str(), &end);
            if (errno || !end || *end || !std::isfinite(d) || d <= 0 || d > 1e7)
                bad("--duration needs a positive number of seconds, got '" + v + "'");
            o.duration_s = d;
        } else if (a == "--wakeup-events") {
            uint64_t n = parse_u64("--wakeup-events", value());
            if (n == 0 || n > UINT32_MAX) bad("--wakeup-events must be between 1 and 4294967295");
            o.sampling.wakeup_events = uint32_t(n);
        } else if (a == "--wakeup-watermark") {
            uint64_t n = parse_u64("--wakeup-watermark", value());
            if (n == 0 || n > UINT32_MAX) bad("--wakeup-watermark must be between 1 and 4294967295 bytes");
            o.sampling.wakeup_watermark = uint32_t(n);
        } else if (a == "-v" || a == "--verbose") {
            no_value();
            ++o.verbose;
        } else if (a == "--no-direct") {
            no_value();
            o.allow_direct = false;
        } else if (a == "--staging-buffers") {
            o.staging_buffers = size_t(parse_u64(a, value()));
            if (o.staging_buffers < 2 || o.staging_buffers > 4096) bad("--staging-buffers must be 2..4096");
        } else if (a == "--staging-kb") {
            uint64_t kb = parse_u64(a, value());
            if (kb < kMinBufferBytes / 1024 || kb % 4 != 0 || kb > (1u << 20))
                bad("--staging-kb must be a multiple of 4 from 64 (the largest record) to 1048576");
            o.staging_buffer_bytes = size_t(kb) * 1024;
        } else if (a == "--no-cut-samples") {
            no_value();
            o.cut_samples = false;
        } else if (a == "--no-back-pressure") {
            no_value();
            o.back_pressure = false;
        } else if (a == "--no-stack-trim") {
            no_value();
            o.stack_trim = false;
        } else if (a == "--cq-entries") {
            uint64_t n = parse_u64(a, value());
            if (n < 2 || n > 65536) bad("--cq-entries must be 2..65536");
            o.cq_entries = unsigned(n);
        } else if (!a.empty() && a[0] == '-') {
            bad("unknown option '" + args[i] + "' (see ringcap record --help)");
        } else {
            // perf record also takes the command without '--'.
            o.command.assign(args.begin() + long(i), args.end());
            break;
        }
    }
    if (o.pipe_backlog && o.output != "-") bad("--pipe-backlog is for -o - (perf's pipe format on stdout)");
    if (o.output == "-" && o.switch_output.mode != SwitchOutput::Mode::None)
        bad("--switch-output rotates files: it cannot split -o - (one stream on stdout); give a file name with -o");
    if (o.output == "-" && o.max_size)
        bad("--max-size bounds a file: with -o - the reader decides (see --pipe-backlog for what may wait in memory)");
    if (o.output == "-" && o.json == "-")
        bad("-o - writes the perf data to stdout: --json - would mix the summary into it; give --json a file");
    if (have_F && have_c) bad("-F and -c exclude each other: give a frequency or a period");
    if (o.sampling.wakeup_events && o.sampling.wakeup_watermark)
        bad("--wakeup-events and --wakeup-watermark exclude each other");
    if (o.all_cpus && o.cpus) bad("-a and -C exclude each other");
    const bool tasks = !o.pids.empty() || !o.tids.empty();
    if (tasks && (o.all_cpus || o.cpus)) bad("-p/-t record tasks: they exclude -a and -C");
    if (tasks && !o.command.empty()) bad("-p/-t and a command exclude each other");
    if (!o.all_cpus && !o.cpus && o.command.empty() && !tasks)
        bad("nothing to record: give -a (all CPUs), -C LIST, -p PID, -t TID, or -- COMMAND");
    const bool flight = o.flight_recorder_s > 0;
    if ((o.flight_recorder_size || o.flight_recorder_on_failure) && !flight)
        bad("--flight-recorder-size and --flight-recorder-on-failure need --flight-recorder=DURATION");
    if (o.flight_recorder_on_failure && o.command.empty())
        bad("--flight-recorder-on-failure needs a command (-- COMMAND) whose failure it waits for");
    if (flight && o.output == "-") bad("--flight-recorder writes files of its own: it cannot write to -o -");
    if (flight && o.switch_output.mode != SwitchOutput::Mode::None)
        bad("--flight-recorder and --switch-output exclude each other: the recorder's dumps are the files");
    if (flight && o.compression_level == 0) o.compression_level = 1;  // the window is kept compressed
    if (o.switch_output.max_files && o.switch_output.mode == SwitchOutput::Mode::None && !flight)
        bad("--switch-max-files needs --switch-output or --flight-recorder");
    if (o.switch_output.mode == SwitchOutput::Mode::Size && o.max_size && o.max_size <= o.switch_output.bytes)
        bad("--max-size must be larger than --switch-output's size, or the record stops before any switch");
    o.events = events ? parse_event_list(*events) : std::vector<EventSpec>{default_event()};
    if (!o.cgroups.empty()) {
        // Cgroup events count a group's tasks on whole CPUs: the kernel needs a CPU, not a task.
        if (tasks || (!o.all_cpus && !o.cpus))
            bad("-G: cgroup monitoring only available in system-wide mode: give -a or -C LIST (a cgroup's "
                "tasks are followed on whole CPUs; -p/-t and a command alone record tasks instead)");
        if (std::all_of(o.cgroups.begin(), o.cgroups.end(), [](const std::string& c) { return c.empty(); }))
            bad("-G needs a cgroup name (relative to the cgroup v2 mount, e.g. -G system.slice/cron.service)");
        if (o.cgroups.size() > 1 && o.cgroups.size() > o.events.size())
            bad("-G lists " + std::to_string(o.cgroups.size()) + " cgroups for " + std::to_string(o.events.size()) +
                " event(s): give one name for every event, or one per event in -e order");
        if (o.cgroups.size() == 1) o.cgroups.assign(o.events.size(), o.cgroups.front());  // as perf: one name, every event
        o.cgroups.resize(o.events.size());  // events past the list: every task, as in perf
    }
    return o;
}

}  // namespace ringcap
