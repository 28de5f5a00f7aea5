#include "ringcap/control_channel.hpp"

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ringcap/dir.hpp"

namespace ringcap {

namespace {

// A FIFO by its path: O_RDWR so that opening never waits for the other end and a writer that goes
// away is no end of file. Opened as dir.hpp's open_fifo does (O_PATH first, used only if it is a
// FIFO): a regular file or a device at the name is never opened.
UniqueFd open_control_fifo(const std::string& path, const char* what) {
    struct stat st{};
    UniqueFd fd = open_fifo(path, O_RDWR, st);
    if (fd) return fd;
    const int err = errno;
    const std::string which = std::string("--control: '") + path + "' (the " + what + " FIFO)";
    if (err == ELOOP) throw Error(which + " is a symlink, which is not followed: name the FIFO itself");
    if (err == EINVAL) throw Error(which + " is not a FIFO: make one with mkfifo");
    throw Error(std::string("--control: cannot open the ") + what + " FIFO '" + path + "': " + errno_text(err) +
                (err == ENOENT ? " (make it first: mkfifo " + path + ")"
                 : err == EOPNOTSUPP ? std::string(" (/proc is not mounted: ringcap opens it through /proc/self/fd)")
                                     : std::string()));
}

UniqueFd inherited_fd(const std::string& n, const char* what) {
    char* end = nullptr;
    const long v = std::strtol(n.c_str(), &end, 10);
    if (n.empty() || *end || v < 0 || v > 1 << 20) throw Error(std::string("--control fd: the ") + what + " fd '" + n + "' is not a number");
    const int fd = ::fcntl(int(v), F_DUPFD_CLOEXEC, 3);
    if (fd < 0) throw Error(std::string("--control fd: the ") + what + " fd " + n + " is not open: " + errno_text(errno));
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    return UniqueFd(fd);
}

}  // namespace

ControlChannel::ControlChannel(const std::string& spec) {
    const bool fifo = spec.rfind("fifo:", 0) == 0;
    const std::string rest = spec.substr(fifo ? 5 : 3);
    const size_t comma = rest.find(',');
    const std::string ctl = rest.substr(0, comma), ack = comma == std::string::npos ? "" : rest.substr(comma + 1);
    if (ctl.empty()) throw Error("--control " + spec + ": name the control " + std::string(fifo ? "FIFO" : "fd"));
    ctl_ = fifo ? open_control_fifo(ctl, "control") : inherited_fd(ctl, "control");
    if (!ack.empty()) ack_ = fifo ? open_control_fifo(ack, "ack") : inherited_fd(ack, "ack");
}

std::vector<std::string> ControlChannel::take() {
    std::vector<std::string> out;
    char buf[512];
    for (;;) {
        const ssize_t n = ::read(ctl_.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        partial_.append(buf, size_t(n));
    }
    // perf's tools send a command per write, with or without a newline: split at newlines, and take
    // what is left as a command of its own (a write of up to 512 bytes arrives whole through a FIFO).
    size_t at = 0;
    for (size_t nl; (nl = partial_.find('\n', at)) != std::string::npos; at = nl + 1)
        if (nl > at) out.push_back(partial_.substr(at, nl - at));
    if (at < partial_.size()) out.push_back(partial_.substr(at));
    partial_.clear();
    for (auto& c : out)
        while (!c.empty() && (c.back() == '\r' || c.back() == ' ' || c.back() == '\0')) c.pop_back();
    return out;
}

void ControlChannel::ack() {
    if (!ack_) return;
    static const char kAck[] = "ack\n";
    [[maybe_unused]] ssize_t n = ::write(ack_.get(), kAck, sizeof kAck - 1);  // a full FIFO: the reader is gone
}

}  // namespace ringcap
