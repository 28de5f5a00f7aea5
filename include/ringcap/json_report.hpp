// The record's summary as JSON, for schedulers and batch jobs (--json PATH|-). Schema version 2,
// documented in README ("JSON summary"); fields are only ever added within a version.
#pragma once

#include <string>

#include "ringcap/recorder.hpp"

namespace ringcap {

// 2: back-pressure (dropped now counts the samples it left out too, cut, back_pressure, per CPU and
// per event dropped), collector_realtime.
inline constexpr int kJsonSchemaVersion = 3;

// `s` may be empty (a record that failed before it started); `exit_code` is ringcap's exit status and
// `error` what it printed as the reason ("" for none).
std::string summary_json(const RecordSummary& s, int exit_code, const std::string& error);
// Writes `text` to `path` ("-": stdout), under a temporary name renamed into place. Throws Error.
void write_json_summary(const std::string& path, const std::string& text);
// The value of --json in a command line that may not parse (so a usage error is reported too).
std::string json_path_in(const std::vector<std::string>& args);

}  // namespace ringcap
