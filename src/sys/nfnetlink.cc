#include "sys/nfnetlink.h"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <sys/socket.h>

#include <cerrno>

namespace weft::sys {

Status NfnlError(const std::string& what, int err) {
  return Status::Error(Reason::kFailed, Domain::kFirewall, what, err ? std::strerror(err) : "", err);
}

NfnlMsg::NfnlMsg(uint16_t type, uint16_t flags, uint32_t seq, uint8_t family, uint16_t res_id) {
  nlmsghdr h{};
  h.nlmsg_type = type;
  h.nlmsg_flags = flags;
  h.nlmsg_seq = seq;
  Put(&h, sizeof h);
  nfgenmsg g{};
  g.nfgen_family = family;
  g.version = NFNETLINK_V0;
  g.res_id = htons(res_id);
  Put(&g, sizeof g);
  Align();
}

void NfnlMsg::Attr(uint16_t type, const void* data, size_t len) {
  nlattr a{};
  a.nla_len = static_cast<uint16_t>(NLA_HDRLEN + len);
  a.nla_type = type;
  Put(&a, sizeof a);
  Put(data, len);
  Align();
}

void NfnlMsg::U32Be(uint16_t type, uint32_t v) {
  uint32_t be = htonl(v);
  Attr(type, &be, sizeof be);
}

void NfnlMsg::Raw(const void* attr, size_t len) {
  Put(attr, len);
  Align();
}

size_t NfnlMsg::Begin(uint16_t type) {
  size_t at = buf_.size();
  nlattr a{};
  a.nla_type = type | NLA_F_NESTED;
  Put(&a, sizeof a);
  return at;
}

void NfnlMsg::End(size_t at) {
  uint16_t len = static_cast<uint16_t>(buf_.size() - at);
  std::memcpy(&buf_[at], &len, sizeof len);
}

std::string NfnlMsg::Done() {
  uint32_t len = static_cast<uint32_t>(buf_.size());
  std::memcpy(&buf_[0], &len, sizeof len);
  return buf_;
}

void NfnlMsg::Align() { buf_.resize(NLMSG_ALIGN(buf_.size()), '\0'); }

Result<UniqueFd> NfnlConnect() {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER));
  if (!fd.valid()) return NfnlError("open nfnetlink socket", errno);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return NfnlError("bind nfnetlink", errno);
  // Errors without the request echoed back: they stay small enough to read
  // whole whatever the batch's size.
  int one = 1;
  (void)::setsockopt(fd.get(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  return fd;
}

Status NfnlSend(int fd, const std::string& buf, const std::string& what) {
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  ssize_t n = ::sendto(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  if (n < 0) return NfnlError(what, errno);
  if (static_cast<size_t>(n) != buf.size()) return NfnlError(what + ": short send", EIO);
  return Status::Ok();
}

Status NfnlReadDumpMessages(int fd, const std::string& what, const std::function<void(const nlmsghdr*)>& on_msg) {
  bool interrupted = false;
  std::string buf(1 << 16, '\0');
  while (true) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return NfnlError(what, errno);
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, static_cast<size_t>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_flags & NLM_F_DUMP_INTR) interrupted = true;
      if (h->nlmsg_type == NLMSG_DONE) {
        if (interrupted) return NfnlError(what + ": interrupted by a concurrent change", EINTR);
        return Status::Ok();
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        if (e->error == 0) continue;
        return NfnlError(what, -e->error);
      }
      on_msg(h);
    }
  }
}

Status NfnlReadDump(int fd, const std::string& what, const std::function<void(const char*, size_t)>& on_msg) {
  return NfnlReadDumpMessages(fd, what, [&](const nlmsghdr* h) {
    // A message too short for its nfgenmsg carries no attributes (and its
    // length minus the header would wrap).
    if (h->nlmsg_len < NLMSG_LENGTH(NLMSG_ALIGN(sizeof(nfgenmsg)))) return;
    on_msg(static_cast<const char*>(NLMSG_DATA(h)) + NLMSG_ALIGN(sizeof(nfgenmsg)),
           h->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(sizeof(nfgenmsg))));
  });
}

}  // namespace weft::sys
