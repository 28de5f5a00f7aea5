// perf record's control interface (--control=fifo:CTL[,ACK] or fd:CTL[,ACK]): commands written to a
// FIFO or an inherited fd (snapshot, stop, ping, enable, disable; one per line or per write), each
// acknowledged with "ack\n" on ACK once done, as perf does. ringcap runs as root: a FIFO's name is
// opened O_PATH without following a symlink, and opened for reading and writing (non-blocking) only
// if it is a FIFO (dir.hpp, open_fifo).
#pragma once

#include <string>
#include <vector>

#include "ringcap/sys.hpp"

namespace ringcap {

class ControlChannel {
public:
    ControlChannel() = default;
    // Throws Error (exit status 2) saying what is wrong with `spec` or its files.
    explicit ControlChannel(const std::string& spec);
    int fd() const { return ctl_.get(); }  // -1: none; poll it for POLLIN
    // The commands that arrived (read without blocking), trimmed; unknown ones too (the caller says so).
    std::vector<std::string> take();
    // "ack\n" on ACK, if there is one.
    void ack();

private:
    UniqueFd ctl_, ack_;
    std::string partial_;
};

}  // namespace ringcap
