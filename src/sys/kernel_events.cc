#include "sys/kernel_events.h"

#include <linux/if.h>
#include <linux/netconf.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "sys/nfnetlink.h"

namespace weft::sys {
namespace {

Status Errno(const std::string& what) { return Status::FromErrno(Reason::kFailed, Domain::kKernel, what, errno); }

Result<UniqueFd> Subscribe(int proto, uint32_t groups, const std::vector<int>& more, int rcvbuf, const char* what) {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, proto));
  if (!fd.valid()) return Errno(std::string("open netlink socket for ") + what);
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);  // best effort
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = groups;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return Errno(std::string("subscribe to ") + what);
  for (int g : more)
    if (::setsockopt(fd.get(), SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &g, sizeof g) != 0)
      return Errno(std::string("subscribe to ") + what + " group " + std::to_string(g));
  return fd;
}

std::string AttrString(const void* d, size_t n) {
  return std::string(static_cast<const char*>(d), strnlen(static_cast<const char*>(d), n));
}

bool ParseRt(const nlmsghdr* h, KernelEvent* ev) {
  const int len_all = static_cast<int>(h->nlmsg_len);
  switch (h->nlmsg_type) {
    case RTM_NEWLINK:
    case RTM_DELLINK: {
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) return false;
      const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
      ev->kind = KernelEvent::Kind::kLink;
      ev->deleted = h->nlmsg_type == RTM_DELLINK;
      ev->index = ifi->ifi_index;
      ev->up = (ifi->ifi_flags & IFF_UP) != 0;
      int len = len_all - static_cast<int>(NLMSG_LENGTH(sizeof(ifinfomsg)));
      for (const rtattr* a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len))
        if (a->rta_type == IFLA_IFNAME) ev->name = AttrString(RTA_DATA(a), RTA_PAYLOAD(a));
      return true;
    }
    case RTM_NEWADDR:
    case RTM_DELADDR: {
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ifaddrmsg))) return false;
      const auto* ifa = static_cast<const ifaddrmsg*>(NLMSG_DATA(h));
      ev->kind = KernelEvent::Kind::kAddress;
      ev->deleted = h->nlmsg_type == RTM_DELADDR;
      ev->index = static_cast<int>(ifa->ifa_index);
      ev->family = ifa->ifa_family;
      return true;
    }
    case RTM_NEWROUTE:
    case RTM_DELROUTE: {
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(rtmsg))) return false;
      const auto* rtm = static_cast<const rtmsg*>(NLMSG_DATA(h));
      ev->kind = KernelEvent::Kind::kRoute;
      ev->deleted = h->nlmsg_type == RTM_DELROUTE;
      ev->family = rtm->rtm_family;
      ev->protocol = rtm->rtm_protocol;
      int len = static_cast<int>(RTM_PAYLOAD(h));
      for (const rtattr* a = RTM_RTA(rtm); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type == RTA_GATEWAY) ev->gateway = true;
        if (a->rta_type == RTA_OIF && RTA_PAYLOAD(a) == 4) std::memcpy(&ev->index, RTA_DATA(a), 4);
      }
      return true;
    }
    case RTM_NEWNETCONF: {
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(netconfmsg))) return false;
      const auto* nc = static_cast<const netconfmsg*>(NLMSG_DATA(h));
      ev->kind = KernelEvent::Kind::kNetconf;
      ev->family = nc->ncm_family;
      // netconfmsg is one byte: its attributes start at the aligned length.
      int len = len_all - static_cast<int>(NLMSG_SPACE(sizeof(netconfmsg)));
      const auto* a = reinterpret_cast<const rtattr*>(reinterpret_cast<const char*>(nc) + NLMSG_ALIGN(sizeof(netconfmsg)));
      for (; RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        int v = 0;
        if (RTA_PAYLOAD(a) == 4) std::memcpy(&v, RTA_DATA(a), 4);
        if (a->rta_type == NETCONFA_IFINDEX) ev->index = v;
        if (a->rta_type == NETCONFA_PROXY_NEIGH) ev->proxy_arp = v;
      }
      return true;
    }
    default:
      return false;
  }
}

bool ParseNft(const nlmsghdr* h, KernelEvent* ev) {
  if (NFNL_SUBSYS_ID(h->nlmsg_type) != NFNL_SUBSYS_NFTABLES) return false;
  const int type = NFNL_MSG_TYPE(h->nlmsg_type);
  uint16_t table_attr = 0, name_attr = 0;
  switch (type) {
    case NFT_MSG_NEWTABLE:
    case NFT_MSG_DELTABLE:
      ev->kind = KernelEvent::Kind::kNftTable;
      ev->deleted = type == NFT_MSG_DELTABLE;
      table_attr = NFTA_TABLE_NAME;
      break;
    case NFT_MSG_NEWCHAIN:
    case NFT_MSG_DELCHAIN:
      ev->kind = KernelEvent::Kind::kNftChain;
      ev->deleted = type == NFT_MSG_DELCHAIN;
      table_attr = NFTA_CHAIN_TABLE;
      name_attr = NFTA_CHAIN_NAME;
      break;
    case NFT_MSG_NEWRULE:
    case NFT_MSG_DELRULE:
      ev->kind = KernelEvent::Kind::kNftRule;
      ev->deleted = type == NFT_MSG_DELRULE;
      table_attr = NFTA_RULE_TABLE;
      name_attr = NFTA_RULE_CHAIN;
      break;
    default:
      return false;
  }
  if (h->nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg))) return false;
  const auto* g = static_cast<const nfgenmsg*>(NLMSG_DATA(h));
  ev->family = g->nfgen_family;
  ev->portid = h->nlmsg_pid;
  const char* attrs = reinterpret_cast<const char*>(g) + NLMSG_ALIGN(sizeof(nfgenmsg));
  size_t len = h->nlmsg_len - NLMSG_SPACE(sizeof(nfgenmsg));
  ForEachNfAttr(attrs, len, [&](uint16_t t, const char* d, size_t n) {
    if (t == table_attr) ev->table = AttrString(d, n);
    if (name_attr && t == name_attr) ev->name = AttrString(d, n);
  });
  return true;
}

}  // namespace

Result<KernelEvents> KernelEvents::Open(int rcvbuf_bytes) {
  WEFT_ASSIGN_OR_RETURN(auto rt, Subscribe(NETLINK_ROUTE,
                                           RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE |
                                               RTMGRP_IPV6_ROUTE,
                                           {RTNLGRP_IPV4_NETCONF, RTNLGRP_IPV6_NETCONF}, rcvbuf_bytes,
                                           "rtnetlink notifications"));
  WEFT_ASSIGN_OR_RETURN(auto nft, Subscribe(NETLINK_NETFILTER, 0, {NFNLGRP_NFTABLES}, rcvbuf_bytes,
                                            "nftables notifications"));
  return KernelEvents(std::move(rt), std::move(nft));
}

Status KernelEvents::SetNftListening(int nft_fd, bool on) {
  int g = NFNLGRP_NFTABLES;
  if (::setsockopt(nft_fd, SOL_NETLINK, on ? NETLINK_ADD_MEMBERSHIP : NETLINK_DROP_MEMBERSHIP, &g, sizeof g) != 0)
    return Errno(on ? "join nftables notifications" : "leave nftables notifications");
  return Status::Ok();
}

Status KernelEvents::Drain(int fd, bool nft, std::vector<KernelEvent>* out, bool* lost) {
  char* buf = reinterpret_cast<char*>(buf_.data());
  for (;;) {
    ssize_t n = ::recv(fd, buf, buf_.size() * sizeof(uint32_t), 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {
        *lost = true;
        continue;
      }
      return Errno(nft ? "receive nftables notifications" : "receive rtnetlink notifications");
    }
    unsigned int len = static_cast<unsigned int>(n);  // NLMSG_OK compares it with a __u32
    for (const auto* h = reinterpret_cast<const nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      KernelEvent ev;
      if (nft ? ParseNft(h, &ev) : ParseRt(h, &ev)) out->push_back(std::move(ev));
    }
  }
}

Result<std::vector<KernelEvent>> KernelEvents::Wait(std::chrono::milliseconds timeout, bool* lost) {
  *lost = false;
  std::vector<KernelEvent> out;
  pollfd p[2] = {{rt_.get(), POLLIN, 0}, {nft_.get(), POLLIN, 0}};
  int rc = ::poll(p, 2, static_cast<int>(timeout.count()));
  if (rc < 0 && errno != EINTR) return Errno("poll netlink notifications");
  if (rc <= 0) return out;
  if (p[0].revents) WEFT_RETURN_IF_ERROR(Drain(rt_.get(), false, &out, lost));
  if (p[1].revents) WEFT_RETURN_IF_ERROR(Drain(nft_.get(), true, &out, lost));
  return out;
}

}  // namespace weft::sys
