#include "ringcap/main_wake.hpp"

#include <algorithm>
#include <climits>

namespace ringcap {

std::optional<MainWake::Time> MainWake::next() const {
    std::optional<Time> t;
    auto take = [&t](std::optional<Time> d) {
        if (d && (!t || *d < *t)) t = d;
    };
    // A round is requested once there is new data and the spacing since the last one has passed
    // (longer while there is little);
    // while one is pending its acknowledgements are events, and without new data there is nothing
    // to order (the data growing is an event).
    if ((new_bytes > 0 || rounds_tick) && !round_pending)
        take(last_round + (new_bytes >= kQuietBytes ? kRoundSpacing : quiet_spacing));
    take(duration_end);
    take(status_due);
    take(hotplug_due);
    take(header_due);
    take(switch_due);
    if (polling) take(now + kPoll);
    return t;
}

MainWake::Clock::duration MainWake::quiet_spacing_for(double bytes_per_second) {
    if (!(bytes_per_second > 0)) return kQuietSpacing;
    const auto d = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(double(kQuietRisk) / bytes_per_second));
    return std::clamp<Clock::duration>(d, kQuietSpacing, kQuietLongest);
}

int MainWake::timeout_ms() const {
    const auto t = next();
    if (!t) return -1;
    if (*t <= now) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*t - now).count();
    return int(std::min<int64_t>(ms, INT_MAX));
}

}  // namespace ringcap
