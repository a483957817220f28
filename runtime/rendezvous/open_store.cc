// OpenStore(url): the one place that maps a rendezvous URL to a Store implementation. A new scheme
// is one more entry in kSchemes.
#include <string_view>

#include "rendezvous/kv_protocol.h"
#include "rendezvous/store.h"

namespace hvd::runtime::rendezvous {
namespace {

Status OpenFile(const std::string& url, std::string_view rest, std::unique_ptr<Store>* out) {
  if (rest.empty() || rest.front() != '/') {
    return InvalidArgument("rendezvous URL '" + url +
                           "': a file store needs an absolute directory (file:///abs/dir)");
  }
  return NewFileStore(std::string(rest), out);
}

// hvd://HOST:PORT, hvd-launcherd's rendezvous endpoint (docs/rendezvous.md).
Status OpenLauncher(const std::string& url, std::string_view rest, std::unique_ptr<Store>* out) {
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  return NewTcpStore(std::string(rest), out);
}

struct Scheme {
  std::string_view prefix;  // including "://"
  Status (*open)(const std::string& url, std::string_view rest, std::unique_ptr<Store>* out);
};

constexpr Scheme kSchemes[] = {
    {"file://", &OpenFile},
    {"hvd://", &OpenLauncher},
};

}  // namespace

Status OpenStore(const std::string& url, std::unique_ptr<Store>* out) {
  if (!url.empty() && url.front() == '/') return NewFileStore(url, out);
  for (const Scheme& s : kSchemes) {
    if (url.compare(0, s.prefix.size(), s.prefix) == 0) {
      return s.open(url, std::string_view(url).substr(s.prefix.size()), out);
    }
  }
  std::string understood = "an absolute directory path";
  for (const Scheme& s : kSchemes) understood += ", " + std::string(s.prefix) + "...";
  return InvalidArgument("rendezvous URL '" + url +
                         "' is not understood; expected one of: " + understood);
}

}  // namespace hvd::runtime::rendezvous
