#include "sys/conntrack.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <sys/socket.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <optional>
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

// Reads what the kernel queued without waiting: the errors of requests sent
// without NLM_F_ACK (the kernel handles a datagram's messages while sendto()
// runs, so they are all queued by then). ENOENT (the entry went away) is no
// error: counted into `*gone` when given.
Status DrainErrors(mnl_socket* nl, const std::string& what, size_t* gone = nullptr) {
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(mnl_socket_get_fd(nl), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      return CtError(what, errno);
    }
    CtErrors e = CtErrorsOf(buf, static_cast<size_t>(n));
    if (gone) *gone += e.gone;
    if (e.err) return CtError(what, e.err);
  }
}

// One dump of `family` read to its end: for every entry of the family,
// `build(entry, seq, out)` may append one request to `out` (returning
// whether it did); the requests land in `batches` (datagrams of up to
// 32 KiB). Returns how many requests.
template <typename Build>
Result<size_t> DumpAndBuild(mnl_socket* nl, uint8_t family, uint32_t* seq, std::vector<std::string>* batches,
                            const std::string& what, Build build) {
  WEFT_RETURN_IF_ERROR(Send(nl, CtDumpRequest(family, (*seq)++), what));
  size_t requests = 0;
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
      if (!e || nfct_get_attr_u8(e.get(), ATTR_ORIG_L3PROTO) != family) return true;
      if (batches->empty() || batches->back().size() >= 32 * 1024) batches->emplace_back();
      if (build(*e, *seq, &batches->back())) {
        ++*seq;
        ++requests;
      }
      return true;
    });
    if (err) return CtError(what, err);
    if (done) {
      if (interrupted) return CtError(what + ": interrupted by a concurrent change", EINTR);
      return requests;
    }
  }
}

// Sends `batches` in turn, each followed by reading its errors; `*gone`
// counts the requests whose entry had gone (ENOENT).
Status SendBatches(mnl_socket* nl, const std::vector<std::string>& batches, const std::string& what, size_t* gone) {
  for (const auto& b : batches) {
    if (b.empty()) continue;
    WEFT_RETURN_IF_ERROR(Send(nl, b, what));
    WEFT_RETURN_IF_ERROR(DrainErrors(nl, what, gone));
  }
  return Status::Ok();
}

// A fresh entry with only what names `e`: its original tuple (addresses,
// protocol, ports or ICMP id) and zones, so nothing else of the dumped entry
// (its status, timeout, TCP state) is sent back.
CtEntry IdentityOf(const nf_conntrack& e) {
  CtEntry u(nfct_new());
  nfct_copy(u.get(), &e, NFCT_CP_ORIG);
  for (auto zone : {ATTR_ZONE, ATTR_ORIG_ZONE})
    if (nfct_attr_is_set(&e, zone) > 0) nfct_copy_attr(u.get(), &e, zone);
  return u;
}

// The header of a ctnetlink request about `e`, in `buf`.
nlmsghdr* PutRequestHeader(char* buf, int msg, const nf_conntrack& e, uint32_t seq) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = CtType(msg);
  nlh->nlmsg_flags = NLM_F_REQUEST;  // no NLM_F_ACK: only errors come back
  nlh->nlmsg_seq = seq;
  auto* g = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  g->nfgen_family = nfct_get_attr_u8(&e, ATTR_ORIG_L3PROTO);
  g->version = NFNETLINK_V0;
  g->res_id = 0;
  return nlh;
}

bool HasPorts(uint8_t l4proto) {
  switch (l4proto) {
    case IPPROTO_TCP:
    case IPPROTO_UDP:
    case IPPROTO_SCTP:
    case IPPROTO_UDPLITE:
    case IPPROTO_DCCP:
      return true;
    default:
      return false;
  }
}

// The raw bytes of `text` if it is an address of `family`.
std::optional<std::string> RawAddress(uint8_t family, const std::string& text) {
  char raw[16];
  if (::inet_pton(family, text.c_str(), raw) != 1) return std::nullopt;
  return std::string(raw, family == AF_INET ? 4 : 16);
}

// The address attribute `attr` of `e` is `raw`.
bool AddressIs(const nf_conntrack& e, nf_conntrack_attr attr, const std::string& raw) {
  const void* a = nfct_get_attr(&e, attr);
  return a && std::memcmp(a, raw.data(), raw.size()) == 0;
}

// The port attribute `attr` of `e` (host order), 0 when it has none.
uint16_t PortOf(const nf_conntrack& e, nf_conntrack_attr attr) {
  if (nfct_attr_is_set(&e, attr) <= 0) return 0;
  return ntohs(nfct_get_attr_u16(&e, attr));
}

}  // namespace

void CtFree::operator()(nf_conntrack* ct) const { nfct_destroy(ct); }

CtErrors CtErrorsOf(const char* buf, size_t n) {
  CtErrors out;
  ForEachMessage(buf, static_cast<ssize_t>(n), [&](const nlmsghdr* h) {
    if (h->nlmsg_type != NLMSG_ERROR) return true;
    const int e = ErrorOf(h);
    if (e == ENOENT)
      ++out.gone;
    else if (e != 0)
      out.err = e;
    return out.err == 0;
  });
  return out;
}

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
  CtEntry u = IdentityOf(e);
  nfct_set_attr_u32(u.get(), ATTR_MARK, mark);
  // Tuple, zones, mark and mask: under 200 bytes (an IPv6 tuple is ~90).
  alignas(nlmsghdr) char buf[512] = {};  // zeroed: libmnl 1.0.4 leaves attribute padding as it finds it
  // CT_NEW without NLM_F_CREATE: an update.
  nlmsghdr* nlh = PutRequestHeader(buf, IPCTNL_MSG_CT_NEW, e, seq);
  nfct_nlmsg_build(nlh, u.get());
  // The library has no mask for an update's mark; the attribute is libmnl's.
  mnl_attr_put_u32(nlh, CTA_MARK_MASK, htonl(mark));
  out->append(buf, nlh->nlmsg_len);
}

void CtDeleteRequest(const nf_conntrack& e, uint32_t seq, std::string* out) {
  CtEntry u = IdentityOf(e);
  alignas(nlmsghdr) char buf[512] = {};  // tuple and zones: under 200 bytes
  nlmsghdr* nlh = PutRequestHeader(buf, IPCTNL_MSG_CT_DELETE, e, seq);
  nfct_nlmsg_build(nlh, u.get());
  out->append(buf, nlh->nlmsg_len);
}

Result<CtDeleteSet> CtDeleteSet::Parse(const std::vector<CtDeleteFilter>& filters) {
  CtDeleteSet set;
  for (const auto& f : filters) {
    auto bad = [&](const std::string& why) {
      std::string d = "family " + std::to_string(f.family) + " proto " + std::to_string(f.l4proto);
      if (f.orig_dst) d += " orig-dst " + *f.orig_dst;
      if (f.orig_dport) d += " dport " + std::to_string(f.orig_dport);
      if (f.reply_src) d += " reply-src " + *f.reply_src;
      if (f.reply_sport) d += " reply-sport " + std::to_string(f.reply_sport);
      return Status::Error(Reason::kInvalidArgument, Domain::kFirewall, "conntrack: bad delete filter: " + why, d);
    };
    if (f.family != AF_INET && f.family != AF_INET6) return bad("family is neither AF_INET nor AF_INET6");
    if (f.l4proto == 0) return bad("no layer-4 protocol");
    if ((f.orig_dport || f.reply_sport) && !HasPorts(f.l4proto)) return bad("a port with a protocol without ports");
    if (!f.orig_dst && !f.orig_dport && !f.reply_src) return bad("names no destination, port nor reply source");
    if (f.reply_sport && !f.reply_src) return bad("a reply port without a reply source");
    Match m;
    m.reply_sport = f.reply_sport;
    const char* fam = f.family == AF_INET ? "IPv4" : "IPv6";
    if (f.orig_dst) {
      auto raw = RawAddress(f.family, *f.orig_dst);
      if (!raw) return bad("\"" + *f.orig_dst + "\" is not an " + fam + " address");
      m.orig_dst = *raw;
    }
    if (f.reply_src) {
      auto raw = RawAddress(f.family, *f.reply_src);
      if (!raw) return bad("\"" + *f.reply_src + "\" is not an " + fam + " address");
      m.reply_src = *raw;
    }
    set.by_key_[{f.family, f.l4proto, f.orig_dport}].push_back(std::move(m));
  }
  return set;
}

bool CtDeleteSet::wants(uint8_t family) const {
  auto it = by_key_.lower_bound({family, 0, 0});
  return it != by_key_.end() && std::get<0>(it->first) == family;
}

bool CtDeleteSet::Matches(const nf_conntrack& e) const {
  const uint8_t family = nfct_get_attr_u8(&e, ATTR_ORIG_L3PROTO);
  const uint8_t proto = nfct_get_attr_u8(&e, ATTR_ORIG_L4PROTO);
  const bool v6 = family == AF_INET6;
  const uint16_t dport = HasPorts(proto) ? PortOf(e, ATTR_ORIG_PORT_DST) : 0;
  // The filters of this entry's port, then those of any port.
  for (uint16_t port : {dport, uint16_t{0}}) {
    auto it = by_key_.find({family, proto, port});
    if (it == by_key_.end()) continue;
    for (const Match& m : it->second) {
      if (!m.orig_dst.empty() && !AddressIs(e, v6 ? ATTR_ORIG_IPV6_DST : ATTR_ORIG_IPV4_DST, m.orig_dst)) continue;
      if (!m.reply_src.empty() && !AddressIs(e, v6 ? ATTR_REPL_IPV6_SRC : ATTR_REPL_IPV4_SRC, m.reply_src))
        continue;
      if (m.reply_sport && PortOf(e, ATTR_REPL_PORT_SRC) != m.reply_sport) continue;
      return true;
    }
    if (port == 0) break;
  }
  return false;
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
    WEFT_ASSIGN_OR_RETURN(
        size_t n, DumpAndBuild(nl.get(), family, &seq, &batches, what + " (dump)",
                               [&](const nf_conntrack& e, uint32_t s, std::string* out) {
                                 if (!CtEntryMatches(e, f)) return false;
                                 if (nfct_attr_is_set(&e, ATTR_MARK) > 0 &&
                                     (nfct_get_attr_u32(&e, ATTR_MARK) & mark) == mark)
                                   return false;  // already marked
                                 CtMarkRequest(e, mark, s, out);
                                 return true;
                               }));
    // The updates go in datagrams of up to 32 KiB; only errors come back.
    WEFT_RETURN_IF_ERROR(SendBatches(nl.get(), batches, what, nullptr));
    updated += n;
  }
  return updated;
}

Result<size_t> ConntrackDelete(const std::vector<CtDeleteFilter>& filters) {
  WEFT_ASSIGN_OR_RETURN(CtDeleteSet set, CtDeleteSet::Parse(filters));
  if (!set.wants(AF_INET) && !set.wants(AF_INET6)) return size_t{0};
  WEFT_ASSIGN_OR_RETURN(MnlSocket nl, Connect());
  size_t deleted = 0;
  uint32_t seq = 1;
  for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
    if (!set.wants(family)) continue;
    const std::string what = std::string("conntrack: delete entries of ") + (family == AF_INET ? "ipv4" : "ipv6");
    // The dump is read to its end before the first delete goes out (on the
    // same socket: the deletes' errors would come between the dump's parts).
    std::vector<std::string> batches;
    WEFT_ASSIGN_OR_RETURN(size_t n, DumpAndBuild(nl.get(), family, &seq, &batches, what + " (dump)",
                                                 [&](const nf_conntrack& e, uint32_t s, std::string* out) {
                                                   if (!set.Matches(e)) return false;
                                                   CtDeleteRequest(e, s, out);
                                                   return true;
                                                 }));
    size_t gone = 0;
    WEFT_RETURN_IF_ERROR(SendBatches(nl.get(), batches, what, &gone));
    deleted += n - std::min(gone, n);
  }
  return deleted;
}

}  // namespace weft::sys
