// A command line as the CLI tests write it: words split on blanks.
#pragma once

#include <sstream>
#include <string>
#include <vector>

inline std::vector<std::string> split(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> v;
    for (std::string w; in >> w;) v.push_back(w);
    return v;
}
