// Helpers shared by the transport tests: a byte pattern per (source, destination, index) and a
// full exchange with every peer that checks every byte.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace hvd::testing {

inline bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

inline uint8_t Pattern(int src, int dst, size_t i) {
  return static_cast<uint8_t>(src * 31 + dst * 7 + i * 13 + (i >> 9));
}

// Exchanges payloads of 0, 1 and 1 MiB + 3 bytes with every peer and checks every byte. Peers are
// visited in increasing rank order, which orders all pairs consistently: no deadlock.
inline Status ExchangeWithAll(runtime::transport::Transport& t) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{(1 << 20) + 3}}) {
    for (int p = 0; p < t.size(); ++p) {
      if (p == t.rank()) continue;
      std::vector<uint8_t> out(n), in(n, 0xEE);
      for (size_t i = 0; i < n; ++i) out[i] = Pattern(t.rank(), p, i);
      HVD_RETURN_IF_ERROR(runtime::transport::SendRecv(t, p, out.data(), n, p, in.data(), n,
                                                       std::chrono::milliseconds(20000)));
      for (size_t i = 0; i < n; ++i) {
        if (in[i] != Pattern(p, t.rank(), i)) {
          return Internal("byte " + std::to_string(i) + " of " + std::to_string(n) + " from rank " +
                          std::to_string(p) + " is wrong");
        }
      }
    }
  }
  return Status::OK();
}

}  // namespace hvd::testing
