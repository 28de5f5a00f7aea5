#include "ringcap/json_report.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "ringcap/dir.hpp"
#include "ringcap/output_file.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

std::string summary_json(const RecordSummary& s, int exit_code, const std::string& error) {
    using json = nlohmann::ordered_json;  // keys in schema order, version first
    json j;
    j["version"] = kJsonSchemaVersion;
    j["samples"] = s.total.samples;
    j["lost"] = s.kernel_lost;
    // ringcap drops nothing it read unless a write failed; then what was read but not written is
    // known in bytes only.
    const bool unwritten = !s.error.empty();
    // Read and not written: samples left out under back-pressure, and with --max-size the buffers
    // refused once the file was full (their samples; with -z not countable).
    j["dropped"] = unwritten || s.refused_compressed ? json(nullptr) : json(s.refused_samples + s.total.dropped);
    j["cut"] = s.total.cut;
    // Measured where the data stopped; else (a summary from elsewhere) estimated from what was read.
    const uint64_t lost_bytes = s.unwritten_bytes ? s.unwritten_bytes
                                : unwritten && s.total.bytes > s.file_bytes ? s.total.bytes - s.file_bytes
                                                                           : 0;
    j["unwritten_bytes"] = lost_bytes + s.refused_bytes;
    j["throttled"] = s.total.throttles;
    j["bytes"] = s.file_bytes;
    j["files"] = json::array();
    for (const auto& f : s.files) j["files"].push_back(f);
    if (s.files.empty() && !s.path.empty() && !s.flight) j["files"].push_back(s.path);  // a flight recorder's are its dumps
    j["duration_s"] = s.seconds;
    j["exit_code"] = exit_code;
    j["stop_reason"] = s.stop_reason.empty() ? json(nullptr) : json(s.stop_reason);
    const std::string& why = error.empty() ? s.error : error;
    j["error"] = why.empty() ? json(nullptr) : json(why);
    j["command_status"] = s.command_status.empty() ? json(nullptr) : json(s.command_status);
    j["cpus"] = json::array();
    for (const auto& c : s.cpus)
        j["cpus"].push_back({{"cpu", c.cpu},
                             {"samples", c.ring.samples},
                             {"lost", c.ring.lost},
                             {"dropped", c.ring.dropped},
                             {"cut", c.ring.cut},
                             {"bytes", c.ring.bytes}});
    j["events"] = json::array();
    for (const auto& e : s.events)
        j["events"].push_back({{"name", e.name}, {"samples", e.samples}, {"lost", e.kernel_lost()}, {"dropped", e.dropped}});
    const PressureStats& p = s.pressure;
    j["back_pressure"] = {{"dropped", s.total.dropped},
                          {"cut", s.total.cut},
                          {"shortest_stack", p.shortest_cut ? json(p.shortest_cut) : json(nullptr)},
                          {"frequency_lowered", p.slowed},
                          {"lowest_frequency_divisor", 1u << p.worst_rate_shift},
                          {"zstd_lowered", p.faster_zstd},
                          {"fastest_zstd_level", p.fastest_zstd ? json(p.fastest_zstd) : json(nullptr)},
                          {"trimmed_bytes", s.total.trimmed}};
    j["collectors"] = json::array();
    for (const auto& c : s.collectors)
        j["collectors"].push_back({{"cpu_s", c.cpu_seconds}, {"bytes", c.bytes}, {"rings", c.rings}});
    j["collector_nice"] = s.collector_nice;
    j["collector_realtime"] = s.collector_realtime ? json(s.collector_realtime) : json(nullptr);
    j["compression"] = s.compression_level == 0
                           ? json(nullptr)
                           : json{{"level", s.compression_level},
                                  {"bytes_in", s.compress_input},
                                  {"bytes_out", s.compressed_bytes},
                                  {"cpu_s", s.compress_cpu_seconds}};
    // Schema 3: --flight-recorder's window and dumps (null without it).
    if (s.flight) {
        const FlightSummary& f = *s.flight;
        json dumps = json::array();
        for (const auto& d : f.dumps)
            dumps.push_back({{"path", d.path},
                             {"trigger", d.trigger},
                             {"bytes", d.bytes},
                             {"window_s", d.window_seconds},
                             {"start_time_ns", d.start_time},
                             {"end_time_ns", d.end_time},
                             {"samples", d.samples >= 0 ? json(d.samples) : json(nullptr)},
                             {"kept", std::find(s.files.begin(), s.files.end(), d.path) != s.files.end()}});
        j["flight_recorder"] = {{"duration_s", f.duration_s}, {"size_bound", f.bound}, {"window_s", f.window_seconds},
                                {"window_bytes", f.window_bytes}, {"shrunk", f.shrunk}, {"dumps", dumps}};
    } else {
        j["flight_recorder"] = nullptr;
    }
    return j.dump() + "\n";
}

void write_json_summary(const std::string& path, const std::string& text) {
    auto write_all = [&](int fd) {
        for (size_t done = 0; done < text.size();) {
            const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;
            done += size_t(n);
        }
        return true;
    };
    if (path == "-") {
        if (!write_all(STDOUT_FILENO)) throw Error("--json -: writing stdout failed: " + errno_text(errno));
        return;
    }
    // A scheduler polling for the file never reads half of it: written nameless (dir.hpp), then
    // renamed over `path`, which replaces a symlink planted there instead of following it.
    std::string name;
    const Dir dir = Dir::open_parent(path, &name);
    NewFile f = dir ? dir.create(name, 0644) : NewFile{};
    if (!f) throw Error("--json " + path + ": " + errno_text(errno) + " (choose a writable path)");
    errno = 0;
    int err = !write_all(f.fd()) ? (errno ? errno : EIO) : ::fsync(f.fd()) != 0 ? errno : dir.replace(f, name);
    if (err) throw Error("--json " + path + ": " + errno_text(err) + write_error_hint(err));
}

std::string json_path_in(const std::vector<std::string>& args) {
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--") break;
        if (args[i] == "--json" && i + 1 < args.size()) return args[i + 1];
        if (args[i].rfind("--json=", 0) == 0) return args[i].substr(7);
    }
    return "";
}

}  // namespace ringcap
