#pragma once
// IPv4 route notifications (RTM_NEWROUTE / RTM_DELROUTE, multicast group
// RTNLGRP_IPV4_ROUTE) in the network namespace the monitor was opened in.
// For tests and benchmarks that want to know when the kernel changed without
// polling it with dumps (a dump every few milliseconds competes with the code
// being measured for the CPU and for the routing table).
//
// Not thread-safe: one reader.

#include <chrono>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "sys/netlink.h"

namespace weft::sys {

struct RouteEvent {
  bool added = false;  // RTM_NEWROUTE (also a replace); false: RTM_DELROUTE
  RouteSpec route;     // unicast IPv4 routes only; first nexthop
};

class RouteMonitor {
 public:
  // Subscribes in the calling thread's namespace. `rcvbuf_bytes` is forced
  // (SO_RCVBUFFORCE, needs CAP_NET_ADMIN) so a burst of thousands of routes
  // fits.
  static Result<RouteMonitor> Open(int rcvbuf_bytes = 32 << 20);

  // Waits up to `timeout` for notifications and returns what arrived (maybe
  // nothing). An error with errno ENOBUFS means notifications were lost: the
  // caller must re-read the table with a dump.
  Result<std::vector<RouteEvent>> Wait(std::chrono::milliseconds timeout);

 private:
  explicit RouteMonitor(UniqueFd fd) : fd_(std::move(fd)), buf_(16384) {}
  UniqueFd fd_;
  std::vector<uint32_t> buf_;  // 64 KiB, nlmsghdr-aligned
};

}  // namespace weft::sys
