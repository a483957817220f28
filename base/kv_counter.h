// The value semantics of a rendezvous store's Add, the same in every store: the runtime's memory
// and file stores and hvd-launcherd's KvStore (the hvd:// protocol's ADD). A counter is a plain
// decimal int64; adding past int64 is an error, never a wrap.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "hvd/status.h"

namespace hvd::base {

// Parses a counter value for Add(); InvalidArgument naming the store and key when `text` is not a
// decimal integer.
Status ParseCounter(const std::string& store, std::string_view key, const std::string& text,
                    int64_t* out);

// *sum = value + delta; InvalidArgument on int64 overflow.
Status AddCounter(const std::string& store, std::string_view key, int64_t value, int64_t delta,
                  int64_t* sum);

}  // namespace hvd::base
