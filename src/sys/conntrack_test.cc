// The ctnetlink messages of ConntrackSetMark and ConntrackDelete, without
// root: a dumped entry is built here with libnetfilter_conntrack
// (nfct_nlmsg_build) as the kernel sends it, decoded by ParseCtEntry,
// matched, and its update or delete read back attribute by attribute with
// libmnl.
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

// A flow as a dump carries it: `src`:`sport` -> `dst`:`dport` over
// `proto`, the reply from `reply_src`:`reply_sport` (a DNAT when they differ
// from the destination).
struct Flow {
  int family = AF_INET;
  uint8_t proto = IPPROTO_UDP;
  const char* src = "10.1.0.5";
  uint16_t sport = 40000;
  const char* dst = "10.96.0.10";
  uint16_t dport = 53;
  const char* reply_src = nullptr;  // null: the destination (no DNAT)
  uint16_t reply_sport = 0;         // 0: dport
  Zones zones = {};
};

std::string FlowEntry(const Flow& f) {
  CtEntry ct(nfct_new());
  const bool v6 = f.family == AF_INET6;
  nfct_set_attr_u8(ct.get(), ATTR_ORIG_L3PROTO, static_cast<uint8_t>(f.family));
  nfct_set_attr_u8(ct.get(), ATTR_REPL_L3PROTO, static_cast<uint8_t>(f.family));
  std::string s = Raw(f.family, f.src), d = Raw(f.family, f.dst), r = Raw(f.family, f.reply_src ? f.reply_src : f.dst);
  nfct_set_attr(ct.get(), v6 ? ATTR_ORIG_IPV6_SRC : ATTR_ORIG_IPV4_SRC, s.data());
  nfct_set_attr(ct.get(), v6 ? ATTR_ORIG_IPV6_DST : ATTR_ORIG_IPV4_DST, d.data());
  nfct_set_attr(ct.get(), v6 ? ATTR_REPL_IPV6_SRC : ATTR_REPL_IPV4_SRC, r.data());
  nfct_set_attr(ct.get(), v6 ? ATTR_REPL_IPV6_DST : ATTR_REPL_IPV4_DST, s.data());
  nfct_set_attr_u8(ct.get(), ATTR_ORIG_L4PROTO, f.proto);
  nfct_set_attr_u8(ct.get(), ATTR_REPL_L4PROTO, f.proto);
  if (f.proto == IPPROTO_ICMP || f.proto == IPPROTO_ICMPV6) {
    nfct_set_attr_u8(ct.get(), ATTR_ICMP_TYPE, f.proto == IPPROTO_ICMP ? 8 : 128);
    nfct_set_attr_u8(ct.get(), ATTR_ICMP_CODE, 0);
    nfct_set_attr_u16(ct.get(), ATTR_ICMP_ID, htons(7));
  } else {
    nfct_set_attr_u16(ct.get(), ATTR_ORIG_PORT_SRC, htons(f.sport));
    nfct_set_attr_u16(ct.get(), ATTR_ORIG_PORT_DST, htons(f.dport));
    nfct_set_attr_u16(ct.get(), ATTR_REPL_PORT_SRC, htons(f.reply_sport ? f.reply_sport : f.dport));
    nfct_set_attr_u16(ct.get(), ATTR_REPL_PORT_DST, htons(f.sport));
  }
  nfct_set_attr_u32(ct.get(), ATTR_STATUS, 8);
  nfct_set_attr_u32(ct.get(), ATTR_TIMEOUT, 30);
  if (f.zones.both >= 0) nfct_set_attr_u16(ct.get(), ATTR_ZONE, static_cast<uint16_t>(f.zones.both));
  if (f.zones.orig >= 0) nfct_set_attr_u16(ct.get(), ATTR_ORIG_ZONE, static_cast<uint16_t>(f.zones.orig));

  alignas(nlmsghdr) char buf[1024] = {};
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
  nlh->nlmsg_flags = NLM_F_MULTI;
  nlh->nlmsg_seq = 1;
  auto* g = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  g->nfgen_family = static_cast<uint8_t>(f.family);
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

// ---- ConntrackDelete ----

CtDeleteSet Set(const std::vector<CtDeleteFilter>& filters) {
  auto set = CtDeleteSet::Parse(filters);
  EXPECT_TRUE(set.ok()) << set.status().ToString();
  return set.ok() ? std::move(*set) : CtDeleteSet{};
}

bool Deletes(const CtDeleteSet& set, const Flow& f) {
  auto e = Parse(FlowEntry(f));
  EXPECT_TRUE(e);
  return e && set.Matches(*e);
}

TEST(ConntrackDelete, BadFiltersAreClearErrorsBeforeAnythingIsOpened) {
  const CtDeleteFilter ok{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, std::nullopt, 0};
  struct Case {
    CtDeleteFilter f;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {{0, IPPROTO_UDP, "10.96.0.10", 53, std::nullopt, 0}, "family"},
           {{AF_INET, 0, "10.96.0.10", 53, std::nullopt, 0}, "protocol"},
           {{AF_INET, IPPROTO_ICMP, std::nullopt, 53, std::nullopt, 0}, "without ports"},
           {{AF_INET, IPPROTO_UDP, std::nullopt, 0, std::nullopt, 0}, "names no destination"},
           {{AF_INET, IPPROTO_UDP, std::nullopt, 53, std::nullopt, 5353}, "reply port without"},
           {{AF_INET, IPPROTO_UDP, "fd00::10", 53, std::nullopt, 0}, "\"fd00::10\" is not an IPv4 address"},
           {{AF_INET6, IPPROTO_UDP, "10.96.0.10", 53, std::nullopt, 0}, "\"10.96.0.10\" is not an IPv6 address"},
           {{AF_INET, IPPROTO_UDP, "10.96.0.300", 53, std::nullopt, 0}, "\"10.96.0.300\""},
           {{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, "pod-a", 0}, "\"pod-a\""},
       }) {
    auto set = CtDeleteSet::Parse({ok, c.f});
    ASSERT_FALSE(set.ok()) << c.says;
    EXPECT_EQ(set.status().reason(), Reason::kInvalidArgument);
    EXPECT_NE(set.status().ToString().find(c.says), std::string::npos) << set.status().ToString();
    // ConntrackDelete checks before it opens anything (no root needed), so
    // one bad filter deletes nothing of the good ones either.
    auto r = ConntrackDelete({ok, c.f});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().reason(), Reason::kInvalidArgument);
  }
  // Nothing asked: nothing opened, nothing deleted.
  auto none = ConntrackDelete({});
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, 0u);
}

TEST(ConntrackDelete, FiltersAskForTheirFamiliesOnly) {
  EXPECT_FALSE(Set({}).wants(AF_INET));
  auto v4 = Set({{AF_INET, IPPROTO_UDP, std::nullopt, 30053, std::nullopt, 0}});
  EXPECT_TRUE(v4.wants(AF_INET));
  EXPECT_FALSE(v4.wants(AF_INET6));
  auto v6 = Set({{AF_INET6, IPPROTO_UDP, "fd00:96::10", 53, std::nullopt, 0}});
  EXPECT_FALSE(v6.wants(AF_INET));
  EXPECT_TRUE(v6.wants(AF_INET6));
}

// ClearEntriesForIP: every entry to the service address and port, DNATed
// or not (a Service that got its first endpoint).
TEST(ConntrackDelete, ServiceAddressAndPort) {
  auto set = Set({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, std::nullopt, 0}});
  EXPECT_TRUE(Deletes(set, {}));                                                  // stuck while it had no endpoint
  EXPECT_TRUE(Deletes(set, {.reply_src = "10.244.1.5", .reply_sport = 5353}));  // DNATed
  EXPECT_TRUE(Deletes(set, {.src = "10.1.0.6", .sport = 1}));                   // any client
  EXPECT_FALSE(Deletes(set, {.dport = 54}));
  EXPECT_FALSE(Deletes(set, {.dst = "10.96.0.11"}));
  EXPECT_FALSE(Deletes(set, {.proto = IPPROTO_TCP}));
  EXPECT_FALSE(Deletes(set, {.proto = IPPROTO_ICMP}));
  // A connection from the service address is not one to it.
  EXPECT_FALSE(Deletes(set, {.src = "10.96.0.10", .sport = 53, .dst = "10.1.0.5", .dport = 40000}));
  EXPECT_FALSE(Deletes(set, {.family = AF_INET6, .src = "fd00::5", .dst = "fd00:96::10"}));
  auto v6 = Set({{AF_INET6, IPPROTO_UDP, "fd00:96::10", 53, std::nullopt, 0}});
  EXPECT_TRUE(Deletes(v6, {.family = AF_INET6, .src = "fd00::5", .dst = "fd00:96::10"}));
  EXPECT_FALSE(Deletes(v6, {.family = AF_INET6, .src = "fd00::5", .dst = "fd00:96::11"}));
  // Another protocol when asked for.
  auto sctp = Set({{AF_INET, IPPROTO_SCTP, "10.96.0.10", 53, std::nullopt, 0}});
  EXPECT_TRUE(Deletes(sctp, {.proto = IPPROTO_SCTP}));
  EXPECT_FALSE(Deletes(sctp, {}));
}

// ClearEntriesForPort: a NodePort, on any of the node's addresses.
TEST(ConntrackDelete, NodePortOnAnyAddress) {
  auto set = Set({{AF_INET, IPPROTO_UDP, std::nullopt, 30053, std::nullopt, 0}});
  EXPECT_TRUE(Deletes(set, {.dst = "192.0.2.10", .dport = 30053}));
  EXPECT_TRUE(Deletes(set, {.dst = "198.51.100.1", .dport = 30053, .reply_src = "10.244.1.5", .reply_sport = 53}));
  EXPECT_FALSE(Deletes(set, {.dst = "192.0.2.10", .dport = 30054}));
  // The port is the destination's, not the source's.
  EXPECT_FALSE(Deletes(set, {.sport = 30053, .dst = "192.0.2.10", .dport = 40000}));
  EXPECT_FALSE(Deletes(set, {.family = AF_INET6, .src = "fd00::5", .dst = "fd00::10", .dport = 30053}));
}

// ClearEntriesForNAT / ClearEntriesForPortNAT: only the entries DNATed to
// the endpoint that left, through the service address or the NodePort;
// with the endpoint's port, only those to that port of it.
TEST(ConntrackDelete, DnatedToAnEndpoint) {
  auto set = Set({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, "10.244.1.5", 0}});
  EXPECT_TRUE(Deletes(set, {.reply_src = "10.244.1.5", .reply_sport = 5353}));
  EXPECT_FALSE(Deletes(set, {.reply_src = "10.244.2.5", .reply_sport = 5353}));  // another endpoint stays
  EXPECT_FALSE(Deletes(set, {}));                                                 // not DNATed
  EXPECT_FALSE(Deletes(set, {.dport = 54, .reply_src = "10.244.1.5", .reply_sport = 5353}));
  auto port = Set({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, "10.244.1.5", 5353}});
  EXPECT_TRUE(Deletes(port, {.reply_src = "10.244.1.5", .reply_sport = 5353}));
  EXPECT_FALSE(Deletes(port, {.reply_src = "10.244.1.5", .reply_sport = 5354}));  // its new targetPort
  auto nodeport = Set({{AF_INET, IPPROTO_UDP, std::nullopt, 30053, "10.244.1.5", 5353}});
  EXPECT_TRUE(Deletes(nodeport, {.dst = "192.0.2.10", .dport = 30053, .reply_src = "10.244.1.5", .reply_sport = 5353}));
  EXPECT_FALSE(Deletes(nodeport, {.dst = "192.0.2.10", .dport = 30053, .reply_src = "10.244.2.5", .reply_sport = 5353}));
  EXPECT_FALSE(Deletes(nodeport, {.dst = "192.0.2.10", .dport = 30053}));
  // Without a destination port: every entry DNATed to the endpoint.
  auto any = Set({{AF_INET6, IPPROTO_UDP, std::nullopt, 0, "fd00:244::5", 0}});
  EXPECT_TRUE(Deletes(any, {.family = AF_INET6, .src = "fd00::5", .dst = "fd00:96::10", .reply_src = "fd00:244::5"}));
  EXPECT_TRUE(Deletes(any, {.family = AF_INET6, .src = "fd00::5", .dst = "fd00::1", .dport = 30053,
                            .reply_src = "fd00:244::5"}));
  EXPECT_FALSE(Deletes(any, {.family = AF_INET6, .src = "fd00::5", .dst = "fd00:96::10", .reply_src = "fd00:244::6"}));
}

// Many filters in one set: an entry is deleted when any one names it.
TEST(ConntrackDelete, AnyFilterOfTheSet) {
  auto set = Set({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, "10.244.1.5", 0},
                  {AF_INET, IPPROTO_UDP, "10.96.0.10", 53, "10.244.1.6", 0},
                  {AF_INET, IPPROTO_UDP, "10.96.0.20", 53, std::nullopt, 0},
                  {AF_INET, IPPROTO_UDP, std::nullopt, 30053, std::nullopt, 0},
                  {AF_INET6, IPPROTO_UDP, "fd00:96::10", 53, std::nullopt, 0}});
  EXPECT_TRUE(Deletes(set, {.reply_src = "10.244.1.5"}));
  EXPECT_TRUE(Deletes(set, {.reply_src = "10.244.1.6"}));
  EXPECT_FALSE(Deletes(set, {.reply_src = "10.244.1.7"}));
  EXPECT_TRUE(Deletes(set, {.dst = "10.96.0.20"}));
  EXPECT_TRUE(Deletes(set, {.dst = "10.96.0.30", .dport = 30053}));
  EXPECT_FALSE(Deletes(set, {.dst = "10.96.0.30", .dport = 53}));
  EXPECT_TRUE(Deletes(set, {.family = AF_INET6, .src = "fd00::5", .dst = "fd00:96::10"}));
  EXPECT_FALSE(Deletes(set, {.family = AF_INET6, .src = "fd00::5", .dst = "fd00:96::20"}));
}

TEST(ConntrackDelete, DeleteRequestNamesTheDumpedEntryInItsZone) {
  std::string dumped = FlowEntry({.reply_src = "10.244.1.5", .reply_sport = 5353, .zones = {.both = 7}});
  auto e = Parse(dumped);
  ASSERT_TRUE(e);
  std::string m = "x";  // appended after what is there
  CtDeleteRequest(*e, 11, &m);
  m.erase(0, 1);
  auto* h = Hdr(m);
  EXPECT_EQ(h->nlmsg_len, m.size());
  EXPECT_EQ(h->nlmsg_type, (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE);
  EXPECT_EQ(h->nlmsg_flags, NLM_F_REQUEST);  // errors only come back
  EXPECT_EQ(h->nlmsg_seq, 11u);
  EXPECT_EQ(static_cast<const nfgenmsg*>(NLMSG_DATA(h))->nfgen_family, AF_INET);
  // The entry's own tuple, byte for byte as dumped, and its zone; nothing else.
  auto a = Attrs(m);
  auto d = Attrs(dumped);
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(a[CTA_TUPLE_ORIG], d[CTA_TUPLE_ORIG]);
  EXPECT_EQ(a[CTA_ZONE], d[CTA_ZONE]);
  // The default zone is left out; a zone of the original direction rides in the tuple.
  std::string m0;
  CtDeleteRequest(*Parse(FlowEntry({})), 1, &m0);
  EXPECT_EQ(Attrs(m0).size(), 1u);
  std::string dz = FlowEntry({.family = AF_INET6, .src = "fd00::5", .dst = "fd00:96::10", .zones = {.orig = 4}});
  std::string mz;
  CtDeleteRequest(*Parse(dz), 1, &mz);
  EXPECT_EQ(Attrs(mz).count(CTA_ZONE), 0u);
  EXPECT_EQ(Attrs(mz)[CTA_TUPLE_ORIG], Attrs(dz)[CTA_TUPLE_ORIG]);
  EXPECT_EQ(static_cast<const nfgenmsg*>(NLMSG_DATA(Hdr(mz)))->nfgen_family, AF_INET6);
}

// The kernel's answers to a batch sent without NLM_F_ACK: an entry gone
// between the dump and its delete (ENOENT) is counted, not an error; any
// other errno is.
TEST(ConntrackDelete, GoneEntriesAreCountedOtherErrorsAreErrors) {
  auto error = [](int err, std::string* out) {
    alignas(nlmsghdr) char buf[64] = {};
    nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = NLMSG_ERROR;
    auto* e = static_cast<nlmsgerr*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nlmsgerr)));
    e->error = -err;
    out->append(buf, nlh->nlmsg_len);
  };
  std::string two_gone;
  error(ENOENT, &two_gone);
  error(0, &two_gone);  // an ack
  error(ENOENT, &two_gone);
  CtErrors e = CtErrorsOf(two_gone.data(), two_gone.size());
  EXPECT_EQ(e.gone, 2u);
  EXPECT_EQ(e.err, 0);
  std::string refused;
  error(ENOENT, &refused);
  error(EPERM, &refused);
  error(ENOENT, &refused);  // after the error: not read
  e = CtErrorsOf(refused.data(), refused.size());
  EXPECT_EQ(e.err, EPERM);
  EXPECT_EQ(e.gone, 1u);
  // A truncated error is a malformed answer, never success.
  std::string bad;
  error(ENOENT, &bad);
  reinterpret_cast<nlmsghdr*>(bad.data())->nlmsg_len = sizeof(nlmsghdr);
  bad.resize(sizeof(nlmsghdr));
  EXPECT_EQ(CtErrorsOf(bad.data(), bad.size()).err, EBADMSG);
  EXPECT_EQ(CtErrorsOf(nullptr, 0).gone, 0u);
}

}  // namespace
}  // namespace weft::sys
