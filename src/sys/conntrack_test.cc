// The ctnetlink messages of ConntrackSetMark, built and parsed without root:
// a dumped entry is built here as the kernel sends it.
#include "sys/conntrack.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>

#include "sys/nfnetlink.h"

namespace weft::sys {
namespace {

std::string Raw(int family, const char* ip) {
  char b[16];
  EXPECT_EQ(::inet_pton(family, ip, b), 1) << ip;
  return std::string(b, family == AF_INET ? 4 : 16);
}

void Tuple(NfnlMsg& m, uint16_t which, int family, const char* src, const char* dst, uint16_t sport,
           uint16_t dport) {
  size_t t = m.Begin(which);
  size_t ip = m.Begin(CTA_TUPLE_IP);
  std::string s = Raw(family, src), d = Raw(family, dst);
  m.Attr(family == AF_INET ? CTA_IP_V4_SRC : CTA_IP_V6_SRC, s.data(), s.size());
  m.Attr(family == AF_INET ? CTA_IP_V4_DST : CTA_IP_V6_DST, d.data(), d.size());
  m.End(ip);
  size_t p = m.Begin(CTA_TUPLE_PROTO);
  uint8_t tcp = 6;
  m.Attr(CTA_PROTO_NUM, &tcp, 1);
  uint16_t sp = htons(sport), dp = htons(dport);
  m.Attr(CTA_PROTO_SRC_PORT, &sp, 2);
  m.Attr(CTA_PROTO_DST_PORT, &dp, 2);
  m.End(p);
  m.End(t);
}

// An entry as a dump carries it: orig src->dst, reply from `reply_src`.
std::string Entry(int family, const char* src, const char* dst, const char* reply_src, uint32_t mark,
                  int zone = -1) {
  NfnlMsg m(static_cast<uint16_t>((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW), NLM_F_MULTI, 1,
            static_cast<uint8_t>(family));
  Tuple(m, CTA_TUPLE_ORIG, family, src, dst, 40000, 80);
  Tuple(m, CTA_TUPLE_REPLY, family, reply_src, src, 80, 40000);
  uint32_t status = htonl(8);
  m.Attr(CTA_STATUS, &status, 4);
  m.U32Be(CTA_MARK, mark);
  if (zone >= 0) {
    uint16_t z = htons(static_cast<uint16_t>(zone));
    m.Attr(CTA_ZONE, &z, 2);
  }
  return m.Done();
}

std::optional<CtEntry> Parse(const std::string& msg) {
  return ParseCtEntry(reinterpret_cast<const nlmsghdr*>(msg.data()));
}

// The top-level attributes of a request: type -> payload.
std::map<uint16_t, std::string> Attrs(const std::string& msg) {
  std::map<uint16_t, std::string> out;
  size_t off = NLMSG_LENGTH(sizeof(nfgenmsg));
  ForEachNfAttr(msg.data() + off, msg.size() - off,
                [&](uint16_t t, const char* d, size_t n) { out[t] = std::string(d, n); });
  return out;
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
  auto* h = reinterpret_cast<const nlmsghdr*>(m.data());
  EXPECT_EQ(h->nlmsg_len, m.size());
  EXPECT_EQ(h->nlmsg_type, (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET);
  EXPECT_EQ(h->nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
  EXPECT_EQ(h->nlmsg_seq, 7u);
  auto* g = static_cast<const nfgenmsg*>(NLMSG_DATA(h));
  EXPECT_EQ(g->nfgen_family, AF_INET6);
  EXPECT_EQ(g->version, NFNETLINK_V0);
}

TEST(Conntrack, EntryParsesAddressesMarkAndZone) {
  auto e = Parse(Entry(AF_INET, "10.1.0.5", "10.96.0.10", "10.1.1.7", 0x5, 3));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->family, AF_INET);
  EXPECT_EQ(e->orig_src, Raw(AF_INET, "10.1.0.5"));
  EXPECT_EQ(e->orig_dst, Raw(AF_INET, "10.96.0.10"));
  EXPECT_EQ(e->reply_src, Raw(AF_INET, "10.1.1.7"));
  EXPECT_EQ(e->mark, 0x5u);
  EXPECT_EQ(e->zone.size(), NLA_HDRLEN + 2u);
  auto e6 = Parse(Entry(AF_INET6, "fd00::5", "fd00::6", "fd00::6", 0));
  ASSERT_TRUE(e6.has_value());
  EXPECT_EQ(e6->orig_dst, Raw(AF_INET6, "fd00::6"));
  EXPECT_TRUE(e6->zone.empty());
}

TEST(Conntrack, OtherMessagesAreNoEntries) {
  std::string m = CtDumpRequest(AF_INET, 1);  // a GET, no tuple
  EXPECT_FALSE(Parse(m).has_value());
  NfnlMsg no_tuple(static_cast<uint16_t>((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW), 0, 1, AF_INET);
  no_tuple.U32Be(CTA_MARK, 1);
  EXPECT_FALSE(Parse(no_tuple.Done()).has_value());
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
  auto all6 = ParseCtAddrs({"::/0"});
  ASSERT_TRUE(all6.ok());
  EXPECT_TRUE(CtEntryMatches(*Parse(Entry(AF_INET6, "fd00::5", "fd00::6", "fd00::6", 0)), *all6));
  EXPECT_FALSE(CtEntryMatches(*Parse(Entry(AF_INET, "10.1.0.5", "10.1.1.1", "10.1.1.1", 0)), *all6));
}

TEST(Conntrack, MarkRequestUpdatesTheDumpedEntryInItsZone) {
  std::string dumped = Entry(AF_INET, "10.1.0.5", "10.1.1.1", "10.1.1.1", 0x1, 7);
  auto e = Parse(dumped);
  ASSERT_TRUE(e.has_value());
  std::string m = CtMarkRequest(*e, 0x20000000, 9);
  auto* h = reinterpret_cast<const nlmsghdr*>(m.data());
  EXPECT_EQ(h->nlmsg_len, m.size());
  EXPECT_EQ(h->nlmsg_type, (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW);
  // An update: never creates an entry, and errors only come back.
  EXPECT_EQ(h->nlmsg_flags, NLM_F_REQUEST);
  EXPECT_EQ(h->nlmsg_seq, 9u);
  EXPECT_EQ(static_cast<const nfgenmsg*>(NLMSG_DATA(h))->nfgen_family, AF_INET);
  auto a = Attrs(m);
  auto d = Attrs(dumped);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[CTA_TUPLE_ORIG], d[CTA_TUPLE_ORIG]);  // the entry's own tuple, byte for byte
  EXPECT_EQ(a[CTA_ZONE], d[CTA_ZONE]);
  const std::string be("\x20\x00\x00\x00", 4);
  EXPECT_EQ(a[CTA_MARK], be);
  EXPECT_EQ(a[CTA_MARK_MASK], be);  // only the recheck bit changes
  EXPECT_EQ(a.count(CTA_TUPLE_REPLY), 0u);
  // The default zone is left out, as the kernel leaves it out of the dump.
  auto e0 = Parse(Entry(AF_INET, "10.1.0.5", "10.1.1.1", "10.1.1.1", 0));
  EXPECT_EQ(Attrs(CtMarkRequest(*e0, 1, 1)).count(CTA_ZONE), 0u);
}

}  // namespace
}  // namespace weft::sys
