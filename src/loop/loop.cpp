#include "ringcap/loop.hpp"
#include "ringcap/sys.hpp"

namespace ringcap {

std::unique_ptr<Loop> make_loop(const LoopConfig& cfg, std::string* fallback_reason) {
    switch (cfg.backend) {
        case Backend::Uring:
            return make_uring_loop(cfg);
        case Backend::Epoll:
            return make_epoll_loop(cfg);
        case Backend::Auto:
            break;
    }
    try {
        return make_uring_loop(cfg);
    } catch (const Error& e) {
        if (fallback_reason) *fallback_reason = e.what();
        return make_epoll_loop(cfg);
    }
}

}  // namespace ringcap
