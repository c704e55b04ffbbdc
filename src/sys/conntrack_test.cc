// The ctnetlink messages of ConntrackSetMark, without root: a dumped entry
// is built here with libnetfilter_conntrack (nfct_nlmsg_build) as the kernel
// sends it, decoded by ParseCtEntry, matched, and its update read back
// attribute by attribute with libmnl.
#include "sys/conntrack.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <libmnl/libmnl.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack_tcp.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>

#include <map>

namespace weft::sys {
namespace {

std::string Raw(int family, const char* ip) {
  char b[16];
  EXPECT_EQ(::inet_pton(family, ip, b), 1) << ip;
  return std::string(b, family == AF_INET ? 4 : 16);
}

struct Zones {
  int both = -1;  // CTA_ZONE
  int orig = -1;  // CTA_TUPLE_ZONE in the original tuple (a zone of one direction)
};

// An entry as a dump carries it: orig src:40000 -> dst:80 over TCP, the
// reply from `reply_src`, established, with `mark`.
std::string Entry(int family, const char* src, const char* dst, const char* reply_src, uint32_t mark,
                  Zones zones = {}) {
  CtEntry ct(nfct_new());
  const bool v6 = family == AF_INET6;
  nfct_set_attr_u8(ct.get(), ATTR_ORIG_L3PROTO, static_cast<uint8_t>(family));
  nfct_set_attr_u8(ct.get(), ATTR_REPL_L3PROTO, static_cast<uint8_t>(family));
  std::string s = Raw(family, src), d = Raw(family, dst), r = Raw(family, reply_src);
  nfct_set_attr(ct.get(), v6 ? ATTR_ORIG_IPV6_SRC : ATTR_ORIG_IPV4_SRC, s.data());
  nfct_set_attr(ct.get(), v6 ? ATTR_ORIG_IPV6_DST : ATTR_ORIG_IPV4_DST, d.data());
  nfct_set_attr(ct.get(), v6 ? ATTR_REPL_IPV6_SRC : ATTR_REPL_IPV4_SRC, r.data());
  nfct_set_attr(ct.get(), v6 ? ATTR_REPL_IPV6_DST : ATTR_REPL_IPV4_DST, s.data());
  nfct_set_attr_u8(ct.get(), ATTR_ORIG_L4PROTO, IPPROTO_TCP);
  nfct_set_attr_u8(ct.get(), ATTR_REPL_L4PROTO, IPPROTO_TCP);
  nfct_set_attr_u16(ct.get(), ATTR_ORIG_PORT_SRC, htons(40000));
  nfct_set_attr_u16(ct.get(), ATTR_ORIG_PORT_DST, htons(80));
  nfct_set_attr_u16(ct.get(), ATTR_REPL_PORT_SRC, htons(80));
  nfct_set_attr_u16(ct.get(), ATTR_REPL_PORT_DST, htons(40000));
  nfct_set_attr_u8(ct.get(), ATTR_TCP_STATE, TCP_CONNTRACK_ESTABLISHED);
  nfct_set_attr_u32(ct.get(), ATTR_STATUS, 8);
  nfct_set_attr_u32(ct.get(), ATTR_TIMEOUT, 431999);
  nfct_set_attr_u32(ct.get(), ATTR_MARK, mark);
  if (zones.both >= 0) nfct_set_attr_u16(ct.get(), ATTR_ZONE, static_cast<uint16_t>(zones.both));
  if (zones.orig >= 0) nfct_set_attr_u16(ct.get(), ATTR_ORIG_ZONE, static_cast<uint16_t>(zones.orig));

  alignas(nlmsghdr) char buf[1024] = {};
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
  nlh->nlmsg_flags = NLM_F_MULTI;
  nlh->nlmsg_seq = 1;
  auto* g = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  g->nfgen_family = static_cast<uint8_t>(family);
  g->version = NFNETLINK_V0;
  EXPECT_EQ(nfct_nlmsg_build(nlh, ct.get()), 0);
  return std::string(buf, nlh->nlmsg_len);
}

CtEntry Parse(const std::string& msg) { return ParseCtEntry(reinterpret_cast<const nlmsghdr*>(msg.data())); }

const nlmsghdr* Hdr(const std::string& m) { return reinterpret_cast<const nlmsghdr*>(m.data()); }

// The attributes from `p` to `end`: type -> payload (libmnl's walk; its
// for_each macros are C only).
std::map<uint16_t, std::string> Walk(const void* p, const void* end) {
  std::map<uint16_t, std::string> out;
  for (auto* a = static_cast<const nlattr*>(p);
       mnl_attr_ok(a, static_cast<int>(static_cast<const char*>(end) - reinterpret_cast<const char*>(a)));
       a = mnl_attr_next(a))
    out[mnl_attr_get_type(a)] =
        std::string(static_cast<const char*>(mnl_attr_get_payload(a)), mnl_attr_get_payload_len(a));
  return out;
}
// A message's attributes, after its nfgenmsg.
std::map<uint16_t, std::string> Attrs(const std::string& msg) {
  return Walk(mnl_nlmsg_get_payload_offset(Hdr(msg), sizeof(nfgenmsg)), mnl_nlmsg_get_payload_tail(Hdr(msg)));
}
// A nest's attributes, given its payload as Attrs returned it.
std::map<uint16_t, std::string> Nested(const std::string& payload) {
  return Walk(payload.data(), payload.data() + payload.size());
}

TEST(Conntrack, AddressesParsePerFamily) {
  auto f = ParseCtAddrs({"10.1.0.5", "fd00::5", "0.0.0.0/0"});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->all4);
  EXPECT_FALSE(f->all6);
  EXPECT_EQ(f->v4.count(Raw(AF_INET, "10.1.0.5")), 1u);
  EXPECT_EQ(f->v6.count(Raw(AF_INET6, "fd00::5")), 1u);
  EXPECT_TRUE(f->wants6());
  auto none = ParseCtAddrs({});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->wants4() || none->wants6());
}

TEST(Conntrack, BadAddressIsAClearError) {
  for (const char* bad : {"10.1.0.300", "10.1.0.0/24", "pod-a", ""}) {
    auto f = ParseCtAddrs({"10.1.0.5", bad});
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().reason(), Reason::kInvalidArgument);
    EXPECT_NE(f.status().ToString().find(std::string("\"") + bad + "\""), std::string::npos) << f.status().ToString();
  }
  // ConntrackSetMark checks before it opens anything (no root needed).
  auto r = ConntrackSetMark({"nope"}, 0x20000000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), Reason::kInvalidArgument);
}

TEST(Conntrack, DumpRequestNamesTheFamily) {
  std::string m = CtDumpRequest(AF_INET6, 7);
  ASSERT_EQ(m.size(), NLMSG_LENGTH(sizeof(nfgenmsg)));
  auto* h = Hdr(m);
  EXPECT_EQ(h->nlmsg_len, m.size());
  EXPECT_EQ(h->nlmsg_type, (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET);
  EXPECT_EQ(h->nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
  EXPECT_EQ(h->nlmsg_seq, 7u);
  auto* g = static_cast<const nfgenmsg*>(NLMSG_DATA(h));
  EXPECT_EQ(g->nfgen_family, AF_INET6);
  EXPECT_EQ(g->version, NFNETLINK_V0);
}

TEST(Conntrack, EntryParsesAddressesMarkAndZone) {
  auto e = Parse(Entry(AF_INET, "10.1.0.5", "10.96.0.10", "10.1.1.7", 0x5, {.both = 3}));
  ASSERT_TRUE(e);
  EXPECT_EQ(nfct_get_attr_u8(e.get(), ATTR_ORIG_L3PROTO), AF_INET);
  EXPECT_EQ(std::string(static_cast<const char*>(nfct_get_attr(e.get(), ATTR_ORIG_IPV4_DST)), 4),
            Raw(AF_INET, "10.96.0.10"));
  EXPECT_EQ(std::string(static_cast<const char*>(nfct_get_attr(e.get(), ATTR_REPL_IPV4_SRC)), 4),
            Raw(AF_INET, "10.1.1.7"));
  EXPECT_EQ(nfct_get_attr_u32(e.get(), ATTR_MARK), 0x5u);
  EXPECT_EQ(nfct_get_attr_u16(e.get(), ATTR_ZONE), 3u);
  auto e6 = Parse(Entry(AF_INET6, "fd00::5", "fd00::6", "fd00::6", 0));
  ASSERT_TRUE(e6);
  EXPECT_EQ(std::string(static_cast<const char*>(nfct_get_attr(e6.get(), ATTR_ORIG_IPV6_DST)), 16),
            Raw(AF_INET6, "fd00::6"));
  EXPECT_LE(nfct_attr_is_set(e6.get(), ATTR_ZONE), 0);
}

TEST(Conntrack, OtherMessagesAreNoEntries) {
  EXPECT_FALSE(Parse(CtDumpRequest(AF_INET, 1)));  // a GET, no tuple
  // A CT_NEW with a mark and no tuple.
  alignas(nlmsghdr) char buf[128] = {};
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
  auto* g = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  g->nfgen_family = AF_INET;
  mnl_attr_put_u32(nlh, CTA_MARK, htonl(1));
  EXPECT_FALSE(ParseCtEntry(nlh));
  // Too short for its nfgenmsg: never handed to the library.
  nlmsghdr bare{};
  bare.nlmsg_len = sizeof bare;
  bare.nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
  EXPECT_FALSE(ParseCtEntry(&bare));
}

// The three ways `conntrack -U -s/-d/--reply-src ADDR` matched, and no other.
TEST(Conntrack, MatchesOriginalSourceDestinationAndReplySource) {
  auto f = ParseCtAddrs({"10.1.0.5"});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(CtEntryMatches(*Parse(Entry(AF_INET, "10.1.0.5", "10.1.1.1", "10.1.1.1", 0)), *f));
  EXPECT_TRUE(CtEntryMatches(*Parse(Entry(AF_INET, "10.1.1.1", "10.1.0.5", "10.1.0.5", 0)), *f));
  // Through a Service: the original destination is the ClusterIP, the
  // reply comes from the pod.
  EXPECT_TRUE(CtEntryMatches(*Parse(Entry(AF_INET, "10.1.1.1", "10.96.0.10", "10.1.0.5", 0)), *f));
  EXPECT_FALSE(CtEntryMatches(*Parse(Entry(AF_INET, "10.1.1.1", "10.96.0.10", "10.1.0.6", 0)), *f));
  // An IPv6 entry never matches IPv4 addresses, and every entry of a family
  // matches its /0.
  EXPECT_FALSE(CtEntryMatches(*Parse(Entry(AF_INET6, "fd00::5", "fd00::6", "fd00::6", 0)), *f));
  auto six = ParseCtAddrs({"fd00::6"});
  ASSERT_TRUE(six.ok());
  EXPECT_TRUE(CtEntryMatches(*Parse(Entry(AF_INET6, "fd00::5", "fd00::6", "fd00::6", 0)), *six));
  EXPECT_FALSE(CtEntryMatches(*Parse(Entry(AF_INET6, "fd00::5", "fd00::7", "fd00::7", 0)), *six));
  auto all6 = ParseCtAddrs({"::/0"});
  ASSERT_TRUE(all6.ok());
  EXPECT_TRUE(CtEntryMatches(*Parse(Entry(AF_INET6, "fd00::5", "fd00::6", "fd00::6", 0)), *all6));
  EXPECT_FALSE(CtEntryMatches(*Parse(Entry(AF_INET, "10.1.0.5", "10.1.1.1", "10.1.1.1", 0)), *all6));
}

TEST(Conntrack, MarkRequestUpdatesTheDumpedEntryInItsZone) {
  std::string dumped = Entry(AF_INET, "10.1.0.5", "10.1.1.1", "10.1.1.1", 0x1, {.both = 7});
  auto e = Parse(dumped);
  ASSERT_TRUE(e);
  std::string m = "x";  // appended after what is there
  CtMarkRequest(*e, 0x20000000, 9, &m);
  m.erase(0, 1);
  auto* h = Hdr(m);
  EXPECT_EQ(h->nlmsg_len, m.size());
  EXPECT_EQ(h->nlmsg_type, (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW);
  // An update: never creates an entry, and errors only come back.
  EXPECT_EQ(h->nlmsg_flags, NLM_F_REQUEST);
  EXPECT_EQ(h->nlmsg_seq, 9u);
  EXPECT_EQ(static_cast<const nfgenmsg*>(NLMSG_DATA(h))->nfgen_family, AF_INET);
  auto a = Attrs(m);
  auto d = Attrs(dumped);
  // The entry's own tuple (byte for byte as the kernel's dump had it), its
  // zone, the mark under its mask; nothing else of the entry.
  EXPECT_EQ(a.size(), 4u);
  EXPECT_EQ(a[CTA_TUPLE_ORIG], d[CTA_TUPLE_ORIG]);
  EXPECT_EQ(a[CTA_ZONE], d[CTA_ZONE]);
  const std::string be("\x20\x00\x00\x00", 4);
  EXPECT_EQ(a[CTA_MARK], be);
  EXPECT_EQ(a[CTA_MARK_MASK], be);  // only the recheck bit changes
  for (int absent : {CTA_TUPLE_REPLY, CTA_STATUS, CTA_TIMEOUT, CTA_PROTOINFO}) EXPECT_EQ(a.count(absent), 0u) << absent;
  // The update decodes back to the entry's tuple.
  auto back = Parse(m);
  ASSERT_TRUE(back);
  EXPECT_TRUE(CtEntryMatches(*back, *ParseCtAddrs({"10.1.0.5"})));
  // The default zone is left out, as the kernel leaves it out of the dump.
  std::string m0;
  CtMarkRequest(*Parse(Entry(AF_INET, "10.1.0.5", "10.1.1.1", "10.1.1.1", 0)), 1, 1, &m0);
  EXPECT_EQ(Attrs(m0).count(CTA_ZONE), 0u);
  // A zone of the original direction only rides in the tuple, as dumped.
  std::string dz = Entry(AF_INET6, "fd00::5", "fd00::6", "fd00::6", 0, {.orig = 4});
  std::string mz;
  CtMarkRequest(*Parse(dz), 1, 1, &mz);
  auto az = Attrs(mz);
  EXPECT_EQ(az.count(CTA_ZONE), 0u);
  EXPECT_EQ(az[CTA_TUPLE_ORIG], Attrs(dz)[CTA_TUPLE_ORIG]);
  EXPECT_EQ(Nested(az[CTA_TUPLE_ORIG]).count(CTA_TUPLE_ZONE), 1u);
  // Requests are appended whole: two of them walk as two messages.
  std::string two;
  CtMarkRequest(*e, 1, 1, &two);
  CtMarkRequest(*e, 1, 2, &two);
  int len = static_cast<int>(two.size()), n = 0;
  for (auto* p = Hdr(two); mnl_nlmsg_ok(p, len); p = mnl_nlmsg_next(p, &len)) ++n;
  EXPECT_EQ(n, 2);
  EXPECT_EQ(len, 0);
}

}  // namespace
}  // namespace weft::sys
