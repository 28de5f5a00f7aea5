// `ringcap record`: the entry points. The work is the record session's (session.hpp).
#include "ringcap/recorder.hpp"

#include <memory>
#include <optional>

#include "ringcap/collector_thread.hpp"
#include "ringcap/perf_source.hpp"
#include "ringcap/pipe_output.hpp"
#include "ringcap/process.hpp"
#include "session.hpp"

namespace ringcap {

namespace {
bool to_pipe(const RecordOptions& opts) { return opts.output == "-"; }
}  // namespace

int run_record(const RecordOptions& opts, std::ostream& log, RecordSummary* summary) {
    RecordSummary local;
    if (!to_pipe(opts)) OutputFile::check_path(opts.output);
    // -o -: stdout is taken before the command is forked, so that the command writes to stderr.
    std::optional<StdoutClaim> out;
    if (to_pipe(opts)) out.emplace(StdoutClaim::take());
    PerfTarget target = PerfTarget::from_options(opts);
    // Collectors of CPUs that share a core, package or node take consecutive rings.
    target.cpus = cpu_order(opts.threads, target.cpus);
    // Stop sources first: the command is forked now and held until the events are ready.
    SignalBlock signals;
    std::unique_ptr<Command> command;
    if (!opts.command.empty()) {
        command = std::make_unique<Command>(opts.command, signals);
        if (target.per_task) target.tids = {command->pid()};
    }
    PerfSource source(opts.events, std::move(target));
    Session session(opts, log, signals, command.get());
    if (out) session.set_pipe(out->fd());
    return session.run(source, summary ? *summary : local);
}

int run_record(const RecordOptions& opts, RingSource& source, std::ostream& log, RecordSummary* summary) {
    RecordSummary local;
    if (!to_pipe(opts)) OutputFile::check_path(opts.output);
    std::optional<StdoutClaim> out;
    if (to_pipe(opts)) out.emplace(StdoutClaim::take());
    SignalBlock signals;
    Session session(opts, log, signals, nullptr);
    if (out) session.set_pipe(out->fd());
    return session.run(source, summary ? *summary : local);
}

}  // namespace ringcap
