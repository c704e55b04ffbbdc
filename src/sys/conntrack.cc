#include "sys/conntrack.h"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "sys/nfnetlink.h"

namespace weft::sys {
namespace {

uint16_t CtType(int msg) { return static_cast<uint16_t>((NFNL_SUBSYS_CTNETLINK << 8) | msg); }

// The source and destination of a CTA_TUPLE_* nest's CTA_TUPLE_IP.
void TupleAddrs(const char* p, size_t len, std::string* src, std::string* dst) {
  ForEachNfAttr(p, len, [&](uint16_t t, const char* d, size_t n) {
    if (t != CTA_TUPLE_IP) return;
    ForEachNfAttr(d, n, [&](uint16_t t2, const char* d2, size_t n2) {
      if ((t2 == CTA_IP_V4_SRC && n2 == 4) || (t2 == CTA_IP_V6_SRC && n2 == 16)) src->assign(d2, n2);
      if ((t2 == CTA_IP_V4_DST && n2 == 4) || (t2 == CTA_IP_V6_DST && n2 == 16)) dst->assign(d2, n2);
    });
  });
}

// Reads what the kernel queued without waiting: the errors of updates sent
// without NLM_F_ACK. ENOENT (the entry went away) is no error.
Status DrainErrors(int fd, const std::string& what) {
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
      return NfnlError(what, errno);
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<size_t>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      if (e->error != 0 && e->error != -ENOENT) return NfnlError(what, -e->error);
    }
  }
}

// Every entry of `family` that `f` matches, from one dump.
Result<std::vector<CtEntry>> DumpMatching(int fd, uint8_t family, const CtAddrFilter& f, const std::string& what) {
  WEFT_RETURN_IF_ERROR(NfnlSend(fd, CtDumpRequest(family, 1), what));
  std::vector<CtEntry> out;
  WEFT_RETURN_IF_ERROR(NfnlReadDumpMessages(fd, what, [&](const nlmsghdr* h) {
    auto e = ParseCtEntry(h);
    if (e && e->family == family && CtEntryMatches(*e, f)) out.push_back(std::move(*e));
  }));
  return out;
}

}  // namespace

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
  return NfnlMsg(CtType(IPCTNL_MSG_CT_GET), NLM_F_REQUEST | NLM_F_DUMP, seq, family).Done();
}

std::optional<CtEntry> ParseCtEntry(const nlmsghdr* h) {
  if (h->nlmsg_type != CtType(IPCTNL_MSG_CT_NEW)) return std::nullopt;
  if (h->nlmsg_len < NLMSG_LENGTH(NLMSG_ALIGN(sizeof(nfgenmsg)))) return std::nullopt;
  const auto* g = static_cast<const nfgenmsg*>(NLMSG_DATA(h));
  CtEntry e;
  e.family = g->nfgen_family;
  const char* p = static_cast<const char*>(NLMSG_DATA(h)) + NLMSG_ALIGN(sizeof(nfgenmsg));
  size_t len = h->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(sizeof(nfgenmsg)));
  std::string ignored;
  ForEachNfAttr(p, len, [&](uint16_t t, const char* d, size_t n) {
    const char* attr = d - NLA_HDRLEN;
    switch (t) {
      case CTA_TUPLE_ORIG:
        e.orig_tuple.assign(attr, NLA_HDRLEN + n);
        TupleAddrs(d, n, &e.orig_src, &e.orig_dst);
        break;
      case CTA_TUPLE_REPLY:
        TupleAddrs(d, n, &e.reply_src, &ignored);
        break;
      case CTA_ZONE:
        e.zone.assign(attr, NLA_HDRLEN + n);
        break;
      case CTA_MARK:
        if (n == 4) {
          uint32_t be;
          std::memcpy(&be, d, sizeof be);
          e.mark = ntohl(be);
        }
        break;
      default:
        break;
    }
  });
  if (e.orig_tuple.empty()) return std::nullopt;
  return e;
}

bool CtEntryMatches(const CtEntry& e, const CtAddrFilter& f) {
  const bool v6 = e.family == AF_INET6;
  if (v6 ? f.all6 : f.all4) return true;
  const auto& set = v6 ? f.v6 : f.v4;
  return set.count(e.orig_src) || set.count(e.orig_dst) || set.count(e.reply_src);
}

std::string CtMarkRequest(const CtEntry& e, uint32_t mark, uint32_t seq) {
  NfnlMsg m(CtType(IPCTNL_MSG_CT_NEW), NLM_F_REQUEST, seq, e.family);
  m.Raw(e.orig_tuple.data(), e.orig_tuple.size());
  if (!e.zone.empty()) m.Raw(e.zone.data(), e.zone.size());
  m.U32Be(CTA_MARK, mark);
  m.U32Be(CTA_MARK_MASK, mark);
  return m.Done();
}

Result<size_t> ConntrackSetMark(const std::vector<std::string>& addrs, uint32_t mark) {
  WEFT_ASSIGN_OR_RETURN(CtAddrFilter f, ParseCtAddrs(addrs));
  if (!f.wants4() && !f.wants6()) return size_t{0};
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  size_t updated = 0;
  uint32_t seq = 2;
  for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
    if (family == AF_INET ? !f.wants4() : !f.wants6()) continue;
    const std::string what = std::string("conntrack: mark the entries of ") + (family == AF_INET ? "ipv4" : "ipv6");
    WEFT_ASSIGN_OR_RETURN(auto entries, DumpMatching(fd.get(), family, f, what + " (dump)"));
    // The updates go in datagrams of up to 32 KiB (the kernel handles each
    // message of one in turn, while sendto() runs); only errors come back.
    std::string batch;
    auto flush = [&]() -> Status {
      if (batch.empty()) return Status::Ok();
      WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), batch, what));
      batch.clear();
      return DrainErrors(fd.get(), what);
    };
    for (const auto& e : entries) {
      if ((e.mark & mark) == mark) continue;  // already marked
      batch += CtMarkRequest(e, mark, seq++);
      ++updated;
      if (batch.size() >= 32 * 1024) WEFT_RETURN_IF_ERROR(flush());
    }
    WEFT_RETURN_IF_ERROR(flush());
  }
  return updated;
}

}  // namespace weft::sys
