#include "sys/nflog.h"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace weft::sys {
namespace {

Status NflogError(const std::string& what, int err) {
  return Status::FromErrno(err == EBUSY ? Reason::kBusy : Reason::kFailed, Domain::kKernel, what, err);
}

uint16_t UlogType(int msg) { return static_cast<uint16_t>((NFNL_SUBSYS_ULOG << 8) | msg); }

void PutAttr(std::string* buf, uint16_t type, const void* data, size_t len) {
  nlattr a{};
  a.nla_len = static_cast<uint16_t>(NLA_HDRLEN + len);
  a.nla_type = type;
  buf->append(reinterpret_cast<const char*>(&a), sizeof a);
  buf->append(static_cast<const char*>(data), len);
  buf->resize(NLA_ALIGN(buf->size()), '\0');
}

// A message: nlmsghdr, nfgenmsg (family, res_id = the group), attributes.
std::string Message(uint16_t type, uint16_t flags, uint8_t family, uint16_t group, const std::string& attrs) {
  std::string out(NLMSG_HDRLEN, '\0');
  nfgenmsg g{};
  g.nfgen_family = family;
  g.version = NFNETLINK_V0;
  g.res_id = htons(group);
  out.append(reinterpret_cast<const char*>(&g), sizeof g);
  out.resize(NLMSG_ALIGN(out.size()), '\0');
  out += attrs;
  nlmsghdr h{};
  h.nlmsg_len = static_cast<uint32_t>(out.size());
  h.nlmsg_type = type;
  h.nlmsg_flags = flags;
  h.nlmsg_seq = 1;
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

uint32_t Be32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return ntohl(v);
}

// Sends one config message and reads its ack.
Status Configure(int fd, uint16_t group, const std::string& attrs, const std::string& what) {
  std::string msg = Message(UlogType(NFULNL_MSG_CONFIG), NLM_F_REQUEST | NLM_F_ACK, AF_UNSPEC, group, attrs);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (::sendto(fd, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0)
    return NflogError(what, errno);
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return NflogError(what + ": read ack", errno);
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<size_t>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;  // a packet logged meanwhile
      int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
      if (err != 0) return NflogError(what, err);
      return Status::Ok();
    }
  }
}

}  // namespace

Result<std::vector<NflogPacket>> ParseNflog(std::string_view buf) {
  std::vector<NflogPacket> out;
  if (!buf.empty() && buf.size() < NLMSG_HDRLEN)
    return Status::Error(Reason::kMalformed, Domain::kKernel, "nflog: short netlink message");
  const char* p = buf.data();
  size_t left = buf.size();
  while (left >= NLMSG_HDRLEN) {
    nlmsghdr h;
    std::memcpy(&h, p, sizeof h);
    if (h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > left) break;  // truncated
    size_t body = NLMSG_ALIGN(sizeof(nfgenmsg));
    if (h.nlmsg_type == UlogType(NFULNL_MSG_PACKET) && h.nlmsg_len >= NLMSG_HDRLEN + body) {
      NflogPacket pkt;
      nfgenmsg g;
      std::memcpy(&g, p + NLMSG_HDRLEN, sizeof g);
      pkt.family = g.nfgen_family;
      const char* a = p + NLMSG_HDRLEN + body;
      size_t alen = h.nlmsg_len - NLMSG_HDRLEN - body;
      while (alen >= NLA_HDRLEN) {
        nlattr at;
        std::memcpy(&at, a, sizeof at);
        if (at.nla_len < NLA_HDRLEN || at.nla_len > alen) break;
        const char* d = a + NLA_HDRLEN;
        size_t n = at.nla_len - NLA_HDRLEN;
        switch (at.nla_type & NLA_TYPE_MASK) {
          case NFULA_PACKET_HDR:
            if (n >= sizeof(nfulnl_msg_packet_hdr)) {
              nfulnl_msg_packet_hdr ph;
              std::memcpy(&ph, d, sizeof ph);
              pkt.hw_protocol = ntohs(ph.hw_protocol);
              pkt.hook = ph.hook;
            }
            break;
          case NFULA_PREFIX:
            pkt.prefix.assign(d, strnlen(d, n));
            break;
          case NFULA_IFINDEX_INDEV:
            if (n >= 4) pkt.indev = Be32(d);
            break;
          case NFULA_IFINDEX_OUTDEV:
            if (n >= 4) pkt.outdev = Be32(d);
            break;
          case NFULA_PAYLOAD:
            pkt.payload.assign(d, n);
            break;
          default:
            break;
        }
        size_t step = NLA_ALIGN(at.nla_len);
        if (step >= alen) break;
        a += step;
        alen -= step;
      }
      out.push_back(std::move(pkt));
    }
    size_t step = NLMSG_ALIGN(h.nlmsg_len);
    if (step >= left) break;
    p += step;
    left -= step;
  }
  return out;
}

std::string EncodeNflogPacket(const NflogPacket& p) {
  std::string attrs;
  nfulnl_msg_packet_hdr ph{};
  ph.hw_protocol = htons(p.hw_protocol);
  ph.hook = p.hook;
  PutAttr(&attrs, NFULA_PACKET_HDR, &ph, sizeof ph);
  std::string prefix = p.prefix + '\0';
  PutAttr(&attrs, NFULA_PREFIX, prefix.data(), prefix.size());
  if (p.indev) {
    uint32_t v = htonl(p.indev);
    PutAttr(&attrs, NFULA_IFINDEX_INDEV, &v, 4);
  }
  if (p.outdev) {
    uint32_t v = htonl(p.outdev);
    PutAttr(&attrs, NFULA_IFINDEX_OUTDEV, &v, 4);
  }
  PutAttr(&attrs, NFULA_PAYLOAD, p.payload.data(), p.payload.size());
  return Message(UlogType(NFULNL_MSG_PACKET), 0, p.family, 0, attrs);
}

Result<NflogSocket> NflogSocket::Open(uint16_t group, uint32_t copy_range, int rcvbuf) {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER));
  if (!fd.valid()) return NflogError("open nfnetlink socket", errno);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return NflogError("bind nfnetlink", errno);
  // A bigger buffer than the default absorbs a burst; past it the kernel
  // drops log messages (ENOBUFS), never packets' verdicts.
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  std::string what = "nflog: bind group " + std::to_string(group);
  std::string bind;
  nfulnl_msg_config_cmd cmd{NFULNL_CFG_CMD_BIND};
  PutAttr(&bind, NFULA_CFG_CMD, &cmd, sizeof cmd);
  WEFT_RETURN_IF_ERROR(Configure(fd.get(), group, bind, what));
  std::string mode;
  nfulnl_msg_config_mode m{};
  m.copy_range = htonl(copy_range);
  m.copy_mode = NFULNL_COPY_PACKET;
  PutAttr(&mode, NFULA_CFG_MODE, &m, sizeof m);
  // Batch up to 64 packets or 10 ms per message train: fewer wakeups under
  // a flood, a record within 10 ms otherwise.
  uint32_t qthresh = htonl(64), timeout = htonl(1);
  PutAttr(&mode, NFULA_CFG_QTHRESH, &qthresh, 4);
  PutAttr(&mode, NFULA_CFG_TIMEOUT, &timeout, 4);
  WEFT_RETURN_IF_ERROR(Configure(fd.get(), group, mode, what + ": set copy mode"));
  return NflogSocket(std::move(fd), group);
}

Result<std::vector<NflogPacket>> NflogSocket::Read(int timeout_ms, uint64_t* overruns) {
  pollfd pfd{fd_.get(), POLLIN, 0};
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
    ssize_t n = ::recv(fd_.get(), buf_.data(), buf_.size(), MSG_DONTWAIT);
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
