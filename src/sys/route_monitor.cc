#include "sys/route_monitor.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace weft::sys {
namespace {

// Parses one RTM_NEWROUTE/RTM_DELROUTE; false for anything not an IPv4
// unicast route.
bool ParseRoute(const nlmsghdr* h, RouteEvent* ev) {
  if (h->nlmsg_len < NLMSG_LENGTH(sizeof(rtmsg))) return false;
  const auto* rtm = static_cast<const rtmsg*>(NLMSG_DATA(h));
  if (rtm->rtm_family != AF_INET || rtm->rtm_type != RTN_UNICAST) return false;
  ev->added = h->nlmsg_type == RTM_NEWROUTE;
  RouteSpec& r = ev->route;
  r = RouteSpec();
  r.table = rtm->rtm_table;
  r.protocol = rtm->rtm_protocol;
  r.scope = rtm->rtm_scope;
  uint32_t dst = 0;
  int len = static_cast<int>(RTM_PAYLOAD(h));
  for (const rtattr* a = RTM_RTA(rtm); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    const void* data = RTA_DATA(a);
    size_t n = RTA_PAYLOAD(a);
    switch (a->rta_type) {
      case RTA_DST:
        if (n == 4) std::memcpy(&dst, data, 4);
        break;
      case RTA_GATEWAY:
        if (n == 4) r.gw = IpAddress::FromBytes(false, static_cast<const uint8_t*>(data));
        break;
      case RTA_OIF:
        if (n == 4) r.oif = *static_cast<const int*>(data);
        break;
      case RTA_TABLE:
        if (n == 4) r.table = static_cast<int>(*static_cast<const uint32_t*>(data));
        break;
      case RTA_PRIORITY:
        if (n == 4) r.priority = static_cast<int>(*static_cast<const uint32_t*>(data));
        break;
      default:
        break;
    }
  }
  r.dst = IpPrefix(IpAddress::FromBytes(false, reinterpret_cast<const uint8_t*>(&dst)), rtm->rtm_dst_len);
  r.onlink = (rtm->rtm_flags & RTNH_F_ONLINK) != 0;
  return true;
}

}  // namespace

Result<RouteMonitor> RouteMonitor::Open(int rcvbuf_bytes) {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE));
  if (!fd.valid()) return Status::FromErrno(Reason::kFailed, Domain::kKernel, "open rtnetlink socket", errno);
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf_bytes, sizeof rcvbuf_bytes) != 0 &&
      ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf_bytes, sizeof rcvbuf_bytes) != 0)
    return Status::FromErrno(Reason::kFailed, Domain::kKernel, "set rtnetlink receive buffer", errno);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = RTMGRP_IPV4_ROUTE;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return Status::FromErrno(Reason::kFailed, Domain::kKernel, "subscribe to IPv4 route notifications", errno);
  return RouteMonitor(std::move(fd));
}

Result<std::vector<RouteEvent>> RouteMonitor::Wait(std::chrono::milliseconds timeout) {
  std::vector<RouteEvent> out;
  pollfd p{fd_.get(), POLLIN, 0};
  int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (rc < 0 && errno != EINTR) return Status::FromErrno(Reason::kFailed, Domain::kKernel, "poll rtnetlink", errno);
  if (rc <= 0) return out;
  char* buf = reinterpret_cast<char*>(buf_.data());
  for (;;) {
    ssize_t n = ::recv(fd_.get(), buf, buf_.size() * sizeof(uint32_t), 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return out;
      if (errno == EINTR) continue;
      return Status::FromErrno(Reason::kFailed, Domain::kKernel,
                               "receive route notifications", errno);  // ENOBUFS: lost some
    }
    unsigned int len = static_cast<unsigned int>(n);  // NLMSG_OK compares it with a __u32
    for (const auto* h = reinterpret_cast<const nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type != RTM_NEWROUTE && h->nlmsg_type != RTM_DELROUTE) continue;
      RouteEvent ev;
      if (ParseRoute(h, &ev)) out.push_back(std::move(ev));
    }
  }
}

}  // namespace weft::sys
