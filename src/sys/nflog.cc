#include "sys/nflog.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnetfilter_log/libnetfilter_log.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace weft::sys {
namespace {

Status NflogError(const std::string& what, int err) {
  return Status::FromErrno(err == EBUSY ? Reason::kBusy : Reason::kFailed, Domain::kKernel, what, err);
}

constexpr uint16_t UlogType(int msg) { return static_cast<uint16_t>((NFNL_SUBSYS_ULOG << 8) | msg); }

// Sends one config message (built by `fill` after the library's header for
// `group`) and reads its ack.
template <typename F>
Status Configure(mnl_socket* nl, uint16_t group, uint32_t seq, const std::string& what, F fill) {
  alignas(nlmsghdr) char msg[256] = {};  // zeroed: libmnl 1.0.4 leaves attribute padding as it finds it
  nlmsghdr* nlh = nflog_nlmsg_put_header(msg, NFULNL_MSG_CONFIG, AF_UNSPEC, group);
  nlh->nlmsg_flags |= NLM_F_ACK;
  nlh->nlmsg_seq = seq;
  fill(nlh);
  if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) return NflogError(what, errno);
  alignas(nlmsghdr) char buf[8192];
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return NflogError(what + ": read ack", errno);
    }
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(h, len); h = mnl_nlmsg_next(h, &len)) {
      if (h->nlmsg_type != NLMSG_ERROR || h->nlmsg_seq != seq) continue;  // a packet logged meanwhile
      if (mnl_nlmsg_get_payload_len(h) < sizeof(nlmsgerr)) return NflogError(what + ": short ack", EBADMSG);
      int err = -static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(h))->error;
      if (err != 0) return NflogError(what, err);
      return Status::Ok();
    }
  }
}

// One packet message, decoded by the library into its attributes.
bool DecodePacket(const nlmsghdr* h, NflogPacket* pkt) {
  if (mnl_nlmsg_get_payload_len(h) < sizeof(nfgenmsg)) return false;
  nlattr* attr[NFULA_MAX + 1] = {};
  if (nflog_nlmsg_parse(h, attr) < 0) return false;
  pkt->family = static_cast<const nfgenmsg*>(mnl_nlmsg_get_payload(h))->nfgen_family;
  if (const nlattr* a = attr[NFULA_PACKET_HDR]) {
    nfulnl_msg_packet_hdr ph;
    std::memcpy(&ph, mnl_attr_get_payload(a), sizeof ph);  // its length checked by the library
    pkt->hw_protocol = ntohs(ph.hw_protocol);
    pkt->hook = ph.hook;
  }
  if (const nlattr* a = attr[NFULA_PREFIX]) pkt->prefix = mnl_attr_get_str(a);  // NUL-terminated: checked
  if (const nlattr* a = attr[NFULA_IFINDEX_INDEV]) pkt->indev = ntohl(mnl_attr_get_u32(a));
  if (const nlattr* a = attr[NFULA_IFINDEX_OUTDEV]) pkt->outdev = ntohl(mnl_attr_get_u32(a));
  if (const nlattr* a = attr[NFULA_PAYLOAD])
    pkt->payload.assign(static_cast<const char*>(mnl_attr_get_payload(a)), mnl_attr_get_payload_len(a));
  return true;
}

}  // namespace

Result<std::vector<NflogPacket>> ParseNflog(std::string_view buf) {
  std::vector<NflogPacket> out;
  if (!buf.empty() && buf.size() < NLMSG_HDRLEN)
    return Status::Error(Reason::kMalformed, Domain::kKernel, "nflog: short netlink message");
  // A receive buffer is aligned; a caller's slice at an odd offset is copied.
  std::string copy;
  if (reinterpret_cast<uintptr_t>(buf.data()) % alignof(nlmsghdr) != 0) {
    copy.assign(buf);
    buf = copy;
  }
  int len = static_cast<int>(buf.size());
  for (auto* h = reinterpret_cast<const nlmsghdr*>(buf.data()); mnl_nlmsg_ok(h, len); h = mnl_nlmsg_next(h, &len)) {
    if (h->nlmsg_type != UlogType(NFULNL_MSG_PACKET)) continue;
    NflogPacket pkt;
    if (DecodePacket(h, &pkt)) out.push_back(std::move(pkt));
  }
  return out;
}

std::string EncodeNflogPacket(const NflogPacket& p) {
  // Header, nfgenmsg, four small attributes, the prefix and the payload.
  std::string out(MNL_NLMSG_HDRLEN + 128 + MNL_ALIGN(p.prefix.size() + 1) + MNL_ALIGN(p.payload.size()), '\0');
  nlmsghdr* nlh = nflog_nlmsg_put_header(out.data(), NFULNL_MSG_PACKET, p.family, 0);
  nlh->nlmsg_flags = 0;  // the kernel's messages are no requests
  nlh->nlmsg_seq = 1;
  nfulnl_msg_packet_hdr ph{};
  ph.hw_protocol = htons(p.hw_protocol);
  ph.hook = p.hook;
  mnl_attr_put(nlh, NFULA_PACKET_HDR, sizeof ph, &ph);
  mnl_attr_put_strz(nlh, NFULA_PREFIX, p.prefix.c_str());
  if (p.indev) mnl_attr_put_u32(nlh, NFULA_IFINDEX_INDEV, htonl(p.indev));
  if (p.outdev) mnl_attr_put_u32(nlh, NFULA_IFINDEX_OUTDEV, htonl(p.outdev));
  mnl_attr_put(nlh, NFULA_PAYLOAD, p.payload.size(), p.payload.data());
  out.resize(nlh->nlmsg_len);
  return out;
}

void NflogSocket::Close::operator()(mnl_socket* nl) const { mnl_socket_close(nl); }

int NflogSocket::fd() const { return mnl_socket_get_fd(nl_.get()); }

Result<NflogSocket> NflogSocket::Open(uint16_t group, uint32_t copy_range, int rcvbuf) {
  std::unique_ptr<mnl_socket, Close> nl(mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC));
  if (!nl) return NflogError("open nfnetlink socket", errno);
  if (mnl_socket_bind(nl.get(), 0, MNL_SOCKET_AUTOPID) < 0) return NflogError("bind nfnetlink", errno);
  // A bigger buffer than the default absorbs a burst; past it the kernel
  // drops log messages (ENOBUFS), never packets' verdicts.
  (void)::setsockopt(mnl_socket_get_fd(nl.get()), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  std::string what = "nflog: bind group " + std::to_string(group);
  WEFT_RETURN_IF_ERROR(Configure(nl.get(), group, 1, what,
                                 [](nlmsghdr* nlh) { nflog_attr_put_cfg_cmd(nlh, NFULNL_CFG_CMD_BIND); }));
  // Batch up to 64 packets or 10 ms per message train: fewer wakeups under
  // a flood, a record within 10 ms otherwise. (The library has helpers for
  // the mode only; the other two are libmnl's attributes.)
  WEFT_RETURN_IF_ERROR(Configure(nl.get(), group, 2, what + ": set copy mode", [&](nlmsghdr* nlh) {
    nflog_attr_put_cfg_mode(nlh, NFULNL_COPY_PACKET, copy_range);
    mnl_attr_put_u32(nlh, NFULA_CFG_QTHRESH, htonl(64));
    mnl_attr_put_u32(nlh, NFULA_CFG_TIMEOUT, htonl(1));
  }));
  return NflogSocket(std::move(nl), group);
}

Result<std::vector<NflogPacket>> NflogSocket::Read(int timeout_ms, uint64_t* overruns) {
  pollfd pfd{fd(), POLLIN, 0};
  int r = ::poll(&pfd, 1, timeout_ms);
  if (r < 0) {
    if (errno == EINTR) return std::vector<NflogPacket>{};
    return NflogError("nflog: poll", errno);
  }
  if (r == 0) return std::vector<NflogPacket>{};
  buf_.resize(256 * 1024);
  std::vector<NflogPacket> out;
  // Drain what is queued without waiting again.
  for (int i = 0; i < 64; ++i) {
    ssize_t n = ::recv(fd(), buf_.data(), buf_.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {
        if (overruns) ++*overruns;
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return NflogError("nflog: read", errno);
    }
    auto pkts = ParseNflog(std::string_view(buf_.data(), static_cast<size_t>(n)));
    if (!pkts.ok()) continue;
    for (auto& p : *pkts) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace weft::sys
