// `ringcap record`: the entry points. The work is the record session's (session.hpp).
#include "ringcap/recorder.hpp"

#include <memory>

#include "ringcap/collector_thread.hpp"
#include "ringcap/perf_source.hpp"
#include "ringcap/process.hpp"
#include "session.hpp"

namespace ringcap {

int run_record(const RecordOptions& opts, std::ostream& log, RecordSummary* summary) {
    RecordSummary local;
    OutputFile::check_path(opts.output);
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
    return Session(opts, log, signals, command.get()).run(source, summary ? *summary : local);
}

int run_record(const RecordOptions& opts, RingSource& source, std::ostream& log, RecordSummary* summary) {
    RecordSummary local;
    OutputFile::check_path(opts.output);
    SignalBlock signals;
    return Session(opts, log, signals, nullptr).run(source, summary ? *summary : local);
}

}  // namespace ringcap
