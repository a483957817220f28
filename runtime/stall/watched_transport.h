// A Transport that tells the stall reporter when the engine blocks on peers: every WaitReady is
// bracketed by WaitBegin(peers)/WaitEnd(), whatever transport runs underneath (TCP, shared
// memory). Everything else is passed through.
#pragma once

#include <memory>

#include "stall/stall_reporter.h"
#include "transport/transport.h"

namespace hvd::runtime::stall {

// `reporter` must outlive the result.
std::unique_ptr<transport::Transport> WatchWaits(std::unique_ptr<transport::Transport> inner,
                                                 StallReporter* reporter);

}  // namespace hvd::runtime::stall
