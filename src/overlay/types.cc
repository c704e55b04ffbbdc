#include "overlay/types.h"

namespace weft::overlay {

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kVxlan: return "vxlan";
    case Backend::kHostGw: return "host-gw";
    case Backend::kAuto: return "auto";
  }
  return "?";
}

bool ParseBackend(const std::string& s, Backend* out) {
  for (Backend b : {Backend::kVxlan, Backend::kHostGw, Backend::kAuto}) {
    if (s == BackendName(b)) {
      *out = b;
      return true;
    }
  }
  return false;
}

std::optional<IpAddress> UnderlayAddress(const NodeInfo& n, bool v6) {
  if (n.host_ip && n.host_ip->is_v6() == v6) return n.host_ip;
  if (v6 && n.host_ip6 && n.host_ip6->is_v6()) return n.host_ip6;
  return std::nullopt;
}

}  // namespace weft::overlay
