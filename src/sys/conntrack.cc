#include "sys/conntrack.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace weft::sys {
namespace {

constexpr uint16_t CtType(int msg) { return static_cast<uint16_t>((NFNL_SUBSYS_CTNETLINK << 8) | msg); }

Status CtError(const std::string& what, int err) {
  return Status::Error(Reason::kFailed, Domain::kFirewall, what, err ? std::strerror(err) : "", err);
}

using MnlSocket = std::unique_ptr<mnl_socket, decltype(&mnl_socket_close)>;

// A NETLINK_NETFILTER socket in the calling thread's network namespace, with
// NETLINK_CAP_ACK: errors come back without the request, small enough to
// read whole whatever the batch's size.
Result<MnlSocket> Connect() {
  MnlSocket nl(mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC), &mnl_socket_close);
  if (!nl) return CtError("conntrack: open nfnetlink socket", errno);
  if (mnl_socket_bind(nl.get(), 0, MNL_SOCKET_AUTOPID) < 0) return CtError("conntrack: bind nfnetlink", errno);
  int one = 1;
  (void)mnl_socket_setsockopt(nl.get(), NETLINK_CAP_ACK, &one, sizeof one);
  return nl;
}

Status Send(mnl_socket* nl, const std::string& buf, const std::string& what) {
  ssize_t n = mnl_socket_sendto(nl, buf.data(), buf.size());
  if (n < 0) return CtError(what, errno);
  if (static_cast<size_t>(n) != buf.size()) return CtError(what + ": short send", EIO);
  return Status::Ok();
}

// The messages of one datagram, walked with libmnl.
template <typename F>
void ForEachMessage(const char* buf, ssize_t n, F f) {
  int len = static_cast<int>(n);
  for (auto* h = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(h, len);
       h = mnl_nlmsg_next(h, &len))
    if (!f(h)) return;
}

// The kernel's errno in an NLMSG_ERROR message (0 for an ack).
int ErrorOf(const nlmsghdr* h) {
  if (mnl_nlmsg_get_payload_len(h) < sizeof(nlmsgerr)) return EBADMSG;
  return -static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(h))->error;
}

// Reads what the kernel queued without waiting: the errors of updates sent
// without NLM_F_ACK. ENOENT (the entry went away) is no error.
Status DrainErrors(mnl_socket* nl, const std::string& what) {
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(mnl_socket_get_fd(nl), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      return CtError(what, errno);
    }
    int err = 0;
    ForEachMessage(buf, n, [&](const nlmsghdr* h) {
      if (h->nlmsg_type == NLMSG_ERROR && ErrorOf(h) != 0 && ErrorOf(h) != ENOENT) err = ErrorOf(h);
      return err == 0;
    });
    if (err) return CtError(what, err);
  }
}

// One dump of `family` read to its end: the update of every entry `f`
// matches that lacks a bit of `mark`, appended to `batches` (datagrams of up
// to 32 KiB). Returns how many.
Result<size_t> DumpAndBuildUpdates(mnl_socket* nl, uint8_t family, const CtAddrFilter& f, uint32_t mark,
                                   uint32_t* seq, std::vector<std::string>* batches, const std::string& what) {
  WEFT_RETURN_IF_ERROR(Send(nl, CtDumpRequest(family, (*seq)++), what));
  size_t updates = 0;
  bool interrupted = false;
  std::string buf(1 << 16, '\0');
  while (true) {
    ssize_t n = mnl_socket_recvfrom(nl, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return CtError(what, errno);
    }
    bool done = false;
    int err = 0;
    ForEachMessage(buf.data(), n, [&](const nlmsghdr* h) {
      if (h->nlmsg_flags & NLM_F_DUMP_INTR) interrupted = true;
      if (h->nlmsg_type == NLMSG_DONE) {
        done = true;
        return false;
      }
      if (h->nlmsg_type == NLMSG_ERROR) {
        err = ErrorOf(h);
        return err == 0;
      }
      CtEntry e = ParseCtEntry(h);
      if (!e || nfct_get_attr_u8(e.get(), ATTR_ORIG_L3PROTO) != family || !CtEntryMatches(*e, f)) return true;
      if (nfct_attr_is_set(e.get(), ATTR_MARK) > 0 && (nfct_get_attr_u32(e.get(), ATTR_MARK) & mark) == mark)
        return true;  // already marked
      if (batches->empty() || batches->back().size() >= 32 * 1024) batches->emplace_back();
      CtMarkRequest(*e, mark, (*seq)++, &batches->back());
      ++updates;
      return true;
    });
    if (err) return CtError(what, err);
    if (done) {
      if (interrupted) return CtError(what + ": interrupted by a concurrent change", EINTR);
      return updates;
    }
  }
}

}  // namespace

void CtFree::operator()(nf_conntrack* ct) const { nfct_destroy(ct); }

Result<CtAddrFilter> ParseCtAddrs(const std::vector<std::string>& addrs) {
  CtAddrFilter f;
  for (const auto& a : addrs) {
    if (a == "0.0.0.0/0") {
      f.all4 = true;
      continue;
    }
    if (a == "::/0") {
      f.all6 = true;
      continue;
    }
    char raw[16];
    if (::inet_pton(AF_INET, a.c_str(), raw) == 1)
      f.v4.insert(std::string(raw, 4));
    else if (::inet_pton(AF_INET6, a.c_str(), raw) == 1)
      f.v6.insert(std::string(raw, 16));
    else
      return Status::Error(Reason::kInvalidArgument, Domain::kFirewall, "conntrack: not an address: \"" + a + "\"",
                           "want an IPv4 or IPv6 address, or 0.0.0.0/0 or ::/0 for every entry of a family");
  }
  return f;
}

std::string CtDumpRequest(uint8_t family, uint32_t seq) {
  char buf[MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg))];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = CtType(IPCTNL_MSG_CT_GET);
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  nlh->nlmsg_seq = seq;
  auto* g = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  g->nfgen_family = family;
  g->version = NFNETLINK_V0;
  g->res_id = 0;
  return std::string(buf, nlh->nlmsg_len);
}

CtEntry ParseCtEntry(const nlmsghdr* h) {
  if (h->nlmsg_type != CtType(IPCTNL_MSG_CT_NEW)) return nullptr;
  // nfct_nlmsg_parse takes the nfgenmsg as there.
  if (mnl_nlmsg_get_payload_len(h) < sizeof(nfgenmsg)) return nullptr;
  CtEntry e(nfct_new());
  if (!e) return nullptr;
  if (nfct_nlmsg_parse(h, e.get()) < 0) return nullptr;
  // The library sets the family only with the original tuple.
  if (nfct_attr_is_set(e.get(), ATTR_ORIG_L3PROTO) <= 0) return nullptr;
  return e;
}

bool CtEntryMatches(const nf_conntrack& e, const CtAddrFilter& f) {
  const bool v6 = nfct_get_attr_u8(&e, ATTR_ORIG_L3PROTO) == AF_INET6;
  if (v6 ? f.all6 : f.all4) return true;
  const auto& set = v6 ? f.v6 : f.v4;
  if (set.empty()) return false;
  const size_t len = v6 ? 16 : 4;
  for (auto attr : {v6 ? ATTR_ORIG_IPV6_SRC : ATTR_ORIG_IPV4_SRC, v6 ? ATTR_ORIG_IPV6_DST : ATTR_ORIG_IPV4_DST,
                    v6 ? ATTR_REPL_IPV6_SRC : ATTR_REPL_IPV4_SRC}) {
    const void* a = nfct_get_attr(&e, attr);
    if (a && set.count(std::string_view(static_cast<const char*>(a), len))) return true;
  }
  return false;
}

void CtMarkRequest(const nf_conntrack& e, uint32_t mark, uint32_t seq, std::string* out) {
  // Only what names the entry, and the mark: a fresh object the entry's
  // original tuple (addresses, protocol, ports or ICMP id) and zones are
  // copied into, so nothing else of the dumped entry (its status, timeout,
  // TCP state) is sent back.
  CtEntry u(nfct_new());
  nfct_copy(u.get(), &e, NFCT_CP_ORIG);
  for (auto zone : {ATTR_ZONE, ATTR_ORIG_ZONE})
    if (nfct_attr_is_set(&e, zone) > 0) nfct_copy_attr(u.get(), &e, zone);
  nfct_set_attr_u32(u.get(), ATTR_MARK, mark);

  // Tuple, zones, mark and mask: under 200 bytes (an IPv6 tuple is ~90).
  alignas(nlmsghdr) char buf[512] = {};  // zeroed: libmnl 1.0.4 leaves attribute padding as it finds it
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = CtType(IPCTNL_MSG_CT_NEW);
  nlh->nlmsg_flags = NLM_F_REQUEST;  // no NLM_F_CREATE: an update; no NLM_F_ACK: only errors come back
  nlh->nlmsg_seq = seq;
  auto* g = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  g->nfgen_family = nfct_get_attr_u8(&e, ATTR_ORIG_L3PROTO);
  g->version = NFNETLINK_V0;
  g->res_id = 0;
  nfct_nlmsg_build(nlh, u.get());
  // The library has no mask for an update's mark; the attribute is libmnl's.
  mnl_attr_put_u32(nlh, CTA_MARK_MASK, htonl(mark));
  out->append(buf, nlh->nlmsg_len);
}

Result<size_t> ConntrackSetMark(const std::vector<std::string>& addrs, uint32_t mark) {
  WEFT_ASSIGN_OR_RETURN(CtAddrFilter f, ParseCtAddrs(addrs));
  if (!f.wants4() && !f.wants6()) return size_t{0};
  WEFT_ASSIGN_OR_RETURN(MnlSocket nl, Connect());
  size_t updated = 0;
  uint32_t seq = 1;
  for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
    if (family == AF_INET ? !f.wants4() : !f.wants6()) continue;
    const std::string what = std::string("conntrack: mark the entries of ") + (family == AF_INET ? "ipv4" : "ipv6");
    std::vector<std::string> batches;
    WEFT_ASSIGN_OR_RETURN(size_t n, DumpAndBuildUpdates(nl.get(), family, f, mark, &seq, &batches, what + " (dump)"));
    // The updates go in datagrams of up to 32 KiB (the kernel handles each
    // message of one in turn, while sendto() runs); only errors come back.
    for (const auto& b : batches) {
      WEFT_RETURN_IF_ERROR(Send(nl.get(), b, what));
      WEFT_RETURN_IF_ERROR(DrainErrors(nl.get(), what));
    }
    updated += n;
  }
  return updated;
}

}  // namespace weft::sys
