// weft-bench-floor POD_NETNS_PATH HOST_IFNAME POD_IP
// The floor, exec'd: run inside the node netns (the driver execs it there
// like a plugin), does FloorAdd once and exits. Static, like the plugin.

#include <cstdio>
#include <string>

#include "bench/floor.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: weft-bench-floor POD_NETNS_PATH HOST_IFNAME POD_IP\n");
    return 2;
  }
  auto ip = weft::IpAddress::Parse(argv[3]);
  if (!ip) return 2;
  auto host = weft::sys::Netlink::Open();
  if (!host.ok()) {
    std::fprintf(stderr, "%s\n", host.status().ToString().c_str());
    return 1;
  }
  weft::Status st = weft::bench::FloorAdd(*host, argv[1], argv[2], *ip, 1500);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
