// -G: the cgroup whose tasks perf events follow (perf_event_open with PERF_FLAG_PID_CGROUP takes an
// open cgroup directory in place of a pid).
#pragma once

#include <string>

#include "ringcap/sys.hpp"

namespace ringcap {

struct Cgroup {
    std::string name;  // as given to -G
    std::string path;  // the directory opened
    UniqueFd fd;
};

// The mount point of the cgroup filesystem whose groups perf events can follow, from the text of
// /proc/self/mountinfo: a cgroup v1 hierarchy with the perf_event controller (perf's first choice;
// on such a machine the controller is not on v2), else the cgroup v2 mount. "" if there is neither.
std::string perf_cgroup_mount(const std::string& mountinfo);

// -G NAME's directory: NAME relative to the mount (a leading '/' as /proc/PID/cgroup writes it), or
// an absolute path already under the mount.
std::string cgroup_path(const std::string& mount, const std::string& name);

// Opens -G NAME's directory; Error (exit status 2) saying what to change when there is no cgroup
// mount, no such group, no access, or the path is not a cgroup.
Cgroup open_cgroup(const std::string& name);

}  // namespace ringcap
