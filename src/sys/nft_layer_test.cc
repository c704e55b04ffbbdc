// The typed nftables layer without a socket: encode -> decode through
// libnftnl's own message builders and parsers, the fake's kernel semantics
// (all or nothing, the kernel's errno for each mistake), and the nft-syntax
// rendering of tables, rules and transactions.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ostream>

#include "sys/nft_build.h"
#include "sys/nft_codec.h"
#include "sys/nft_fake.h"
#include "sys/nft_render.h"

namespace weft::sys::nft {

// Elements print as nft-ish bytes in failures (gtest finds these by ADL).
void PrintTo(const Element& e, std::ostream* os) {
  auto hex = [](const std::string& b) {
    std::string s;
    char buf[3];
    for (unsigned char c : b) {
      std::snprintf(buf, sizeof buf, "%02x", c);
      s += buf;
    }
    return s;
  };
  *os << "{key " << hex(e.key) << " end " << hex(e.key_end) << " data " << hex(e.data) << " verdict "
      << (e.verdict ? std::to_string(e.verdict->code) + e.verdict->chain : "-") << " flags " << e.flags << " timeout "
      << e.timeout_ms << "}";
}

namespace {

std::string V4(const char* a) { return AddrBytes(a); }
std::string V6(const char* a) { return AddrBytes(a); }
std::string Ifname(const std::string& n) { return IfnameBytes(n); }

// ip saddr <addr> (with the inet family's dependency).
std::vector<Expr> IpSaddr(const char* addr) {
  return MatchNfproto(NFPROTO_IPV4) + std::vector<Expr>{Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG_1},
                                                        Cmp{NFT_CMP_EQ, V4(addr), NFT_REG_1}};
}
std::vector<Expr> UdpDport(uint16_t port) {
  return MatchL4proto(IPPROTO_UDP) + std::vector<Expr>{Payload{NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1},
                                                       Cmp{NFT_CMP_EQ, Be16(port), NFT_REG_1}};
}

Set Peers4() { return Set{"peers4", 0, kTypeIpv4, 4}; }
Set Ranges() { return Set{"ranges", NFT_SET_INTERVAL, kTypeIpv4, 4}; }
Set PodsOn() {
  return Set{"pods4-on", NFT_SET_INTERVAL | NFT_SET_CONCAT, ConcatType({kTypeIpv4, kTypeIfname}), 20, 0, 0, {4, 16}};
}
Set Vmap() { return Set{"ports", NFT_SET_MAP, kTypeInetService, 2, kTypeVerdict, 0}; }
Set Timed() { return Set{"recent", NFT_SET_TIMEOUT, kTypeIpv6, 16, 0, 0, {}, 30000}; }
Set Natmap() { return Set{"backends", NFT_SET_MAP, kTypeInetService, 2, kTypeIpv4, 4}; }
Set Affinity() { return Set{"affinity", NFT_SET_TIMEOUT | NFT_SET_EVAL, kTypeIpv4, 4, 0, 0, {}, 10800000}; }

// A transaction with every kind of object and expression the layer has.
Transaction Everything() {
  Transaction tx(Family::kInet, "wtest");
  tx.Add(Table{"wtest"});
  tx.Add(NamedCounter{"dropped", 0, 0});
  tx.Add(NamedCounter{"seen", 0, 0});  // a name that fills its attribute: no padding to end it
  tx.Add(NamedLimit{"log-rate", 10, 60, 7, NFT_LIMIT_PKTS, false});
  for (const Set& s : {Peers4(), Ranges(), PodsOn(), Vmap(), Timed(), Natmap(), Affinity()}) tx.Add(s);
  tx.Add(Chain{"vxlan", std::nullopt});
  tx.Add(Chain{"other", std::nullopt});
  tx.Add(Chain{"input", Hook{NF_INET_LOCAL_IN, -10, "filter", "", NF_ACCEPT}});
  tx.Add(Chain{"nat", Hook{NF_INET_PRE_ROUTING, -100, "nat", "", NF_ACCEPT}});
  tx.Add(Rule{"input", UdpDport(8472) + std::vector<Expr>{Verdict{NFT_JUMP, "vxlan"}}, "weft-overlay:abc"});
  tx.Add(Rule{"vxlan",
              {Meta{NFT_META_NFPROTO, NFT_REG_1}, Cmp{NFT_CMP_EQ, U8(NFPROTO_IPV4), NFT_REG_1},
               Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG_1}, Lookup{"peers4", NFT_REG_1, std::nullopt, true},
               CounterRef{"dropped"}, Verdict{NF_DROP, ""}}});
  tx.Add(Rule{"vxlan",
              {Meta{NFT_META_NFPROTO, NFT_REG_1}, Cmp{NFT_CMP_EQ, U8(NFPROTO_IPV4), NFT_REG_1},
               Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG32_00}, Meta{NFT_META_IIFNAME, NFT_REG32_01},
               Lookup{"pods4-on", NFT_REG32_00, std::nullopt, false}, Counter{0, 0}, Verdict{NFT_RETURN, ""}}});
  tx.Add(Rule{"vxlan",
              {Ct{NFT_CT_STATE, NFT_REG_1, std::nullopt},
               Bitwise{NFT_REG_1, NFT_REG_1, 4, Host32(NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED)),
                       Host32(0)},
               Cmp{NFT_CMP_NEQ, Host32(0), NFT_REG_1}, Verdict{NF_ACCEPT, ""}}});
  tx.Add(Rule{"vxlan", std::vector<Expr>{Meta{NFT_META_L4PROTO, NFT_REG_1}, Cmp{NFT_CMP_EQ, U8(IPPROTO_TCP), NFT_REG_1},
                                         Payload{NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1},
                                         Lookup{"ports", NFT_REG_1, NFT_REG_VERDICT, false}}});
  tx.Add(Rule{"vxlan", {Limit{10, 60, 5, NFT_LIMIT_PKTS, false}, Log{"weft: ", 3, 128, 1}, Verdict{NF_DROP, ""}}});
  tx.Add(Rule{"nat",
              IpSaddr("10.0.0.1") + std::vector<Expr>{Numgen{NFT_NG_INCREMENTAL, 2, 0, NFT_REG_1},
                                                      Cmp{NFT_CMP_EQ, Host32(0), NFT_REG_1},
                                                      Immediate{NFT_REG_1, V4("10.1.0.1")}, Immediate{NFT_REG_2, Be16(80)},
                                                      Nat{NFT_NAT_DNAT, false, NFPROTO_IPV4, NFT_REG_1, NFT_REG_2, 0}}});
  tx.Add(Rule{"nat", {Nat{0, true, 0, 0, 0, NF_NAT_RANGE_PROTO_RANDOM_FULLY}}});
  tx.Add(Rule{"other", {LimitRef{"log-rate"}, CounterRef{"seen"}, Verdict{NF_ACCEPT, ""}}});
  tx.Add(Rule{"other", {Fib{NFTA_FIB_F_DADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1}, Cmp{NFT_CMP_EQ, Host32(2), NFT_REG_1},
                        Meta{NFT_META_MARK, NFT_REG_1}, Bitwise{NFT_REG_1, NFT_REG_1, 4, Host32(~0x2000u), Host32(0x2000)},
                        MetaSet{NFT_META_MARK, NFT_REG_1}}});
  tx.Add(Rule{"other", MatchL4proto(IPPROTO_TCP) + std::vector<Expr>{Reject{NFT_REJECT_TCP_RST, 0}}});
  tx.Add(Rule{"other", {Reject{NFT_REJECT_ICMPX_UNREACH, NFT_REJECT_ICMPX_PORT_UNREACH}}});
  tx.Add(Rule{"other", MatchNfproto(NFPROTO_IPV4) +
                           std::vector<Expr>{Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG_1},
                                             Dynset{NFT_DYNSET_OP_UPDATE, "affinity", NFT_REG_1, 0}}});
  tx.Add(Elements{"peers4", {Element{V4("192.0.2.1")}, Element{V4("192.0.2.2")}}});
  tx.Add(Elements{"ranges", {Element{V4("10.0.0.0")}, Element{V4("10.0.1.0"), "", "", std::nullopt, NFT_SET_ELEM_INTERVAL_END}}});
  tx.Add(Elements{"pods4-on", {Element{V4("10.2.0.0") + Ifname("up0"), V4("10.2.0.255") + Ifname("up0")}}});
  tx.Add(Elements{"ports", {Element{Be16(22), "", "", Verdict{NFT_JUMP, "other"}}, Element{Be16(23), "", "", Verdict{NF_DROP, ""}}}});
  tx.Add(Elements{"recent", {Element{V6("2001:db8::1"), "", "", std::nullopt, 0, 60000}}});
  tx.Add(Elements{"backends", {Element{Be16(80), "", V4("10.3.0.1")}}});
  return tx;
}

// What the ops of a transaction of adds describe, as a dump would hold it.
TableState Expected(const Transaction& tx) {
  TableState t;
  t.family = tx.family();
  t.table.name = tx.table();
  for (const Op& op : tx.ops()) {
    if (const auto* c = std::get_if<Chain>(&op.object)) t.chains.push_back(*c);
    if (const auto* r = std::get_if<Rule>(&op.object)) t.rules.push_back(*r);
    if (const auto* s = std::get_if<Set>(&op.object)) t.sets.push_back(*s);
    if (const auto* k = std::get_if<NamedCounter>(&op.object)) t.counters.push_back(*k);
    if (const auto* l = std::get_if<NamedLimit>(&op.object)) t.limits.push_back(*l);
    if (const auto* e = std::get_if<Elements>(&op.object))
      for (const auto& el : e->elems) t.elements[e->set].push_back(el);
  }
  return t;
}

TEST(NftCodec, EveryObjectSurvivesEncodeAndDecodeThroughLibnftnl) {
  const Transaction tx = Everything();
  auto msgs = EncodeOps(tx, 100);
  ASSERT_TRUE(msgs.ok()) << msgs.status().ToString();
  ASSERT_EQ(msgs->size(), tx.ops().size());  // every op here fits one message
  TableState got;
  uint32_t seq = 100;
  for (const Message& m : *msgs) {
    const auto* nlh = reinterpret_cast<const nlmsghdr*>(m.bytes.data());
    EXPECT_EQ(nlh->nlmsg_seq, seq++);
    EXPECT_EQ(nlh->nlmsg_len, m.bytes.size());
    const std::string dumped = AsDumped(m.bytes);
    Status st = DecodeMessage(reinterpret_cast<const nlmsghdr*>(dumped.data()), &got);
    ASSERT_TRUE(st.ok()) << st.ToString() << " op " << DescribeOp(tx, m.op);
  }
  const TableState want = Expected(tx);
  EXPECT_EQ(got.table, want.table);
  EXPECT_EQ(got.family, want.family);
  EXPECT_EQ(got.chains, want.chains);
  ASSERT_EQ(got.rules.size(), want.rules.size());
  for (size_t i = 0; i < want.rules.size(); ++i)
    EXPECT_EQ(got.rules[i], want.rules[i]) << RenderRule(Family::kInet, want.rules[i]) << "\nvs\n"
                                           << RenderRule(Family::kInet, got.rules[i]);
  EXPECT_EQ(got.sets, want.sets);
  EXPECT_EQ(got.elements, want.elements);
  EXPECT_EQ(got.counters, want.counters);
  EXPECT_EQ(got.limits, want.limits);
}

// An anonymous set goes as nft sends it: "__set%d", with the batch id its
// elements and the rule's lookup name (the kernel resolves them).
TEST(NftCodec, AnAnonymousSetIsSentAsNftSendsIt) {
  Transaction tx(Family::kNetdev, "wtest");
  tx.Add(Chain{"c", std::nullopt});
  tx.Add(Set{"__set_ports", NFT_SET_ANONYMOUS | NFT_SET_CONSTANT, kTypeInetService, 2});
  tx.Add(Elements{"__set_ports", {Element{Be16(22)}, Element{Be16(80)}}});
  tx.Add(Rule{"c", {Payload{NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1}, Lookup{"__set_ports", NFT_REG_1},
                    Verdict{NF_ACCEPT, ""}}});
  auto msgs = EncodeOps(tx, 1);
  ASSERT_TRUE(msgs.ok()) << msgs.status().ToString();
  TableState got;
  for (const Message& m : *msgs) {
    const std::string dumped = AsDumped(m.bytes);
    ASSERT_TRUE(DecodeMessage(reinterpret_cast<const nlmsghdr*>(dumped.data()), &got).ok());
  }
  ASSERT_EQ(got.sets.size(), 1u);
  EXPECT_EQ(got.sets[0].name, "__set%d");
  EXPECT_EQ(got.elements["__set%d"].size(), 2u);
  ASSERT_EQ(got.rules.size(), 1u);
  EXPECT_EQ(std::get<Lookup>(got.rules[0].exprs[1]).set, "__set%d");
  // Only constant sets with a name of their kind, and never deleted on their own.
  Transaction bad(Family::kNetdev, "wtest");
  bad.Add(Set{"ports", NFT_SET_ANONYMOUS | NFT_SET_CONSTANT, kTypeInetService, 2});
  EXPECT_TRUE(EncodeOps(bad, 1).status().IsInvalidArgument());
  Transaction del(Family::kNetdev, "wtest");
  del.Delete(Set{"__set0", NFT_SET_ANONYMOUS | NFT_SET_CONSTANT, kTypeInetService, 2});
  EXPECT_TRUE(EncodeOps(del, 1).status().IsInvalidArgument());
  // A table renders its anonymous sets where the rules look them up, as
  // the transaction does.
  EXPECT_NE(RenderTransaction(tx).find("add rule netdev wtest c th dport { 22, 80 } accept"), std::string::npos)
      << RenderTransaction(tx);
  EXPECT_EQ(RenderTransaction(tx).find("__set"), std::string::npos) << RenderTransaction(tx);
}

TEST(NftCodec, ManyElementsAreSplitIntoMessagesOfOneOp) {
  Transaction tx(Family::kInet, "wtest");
  std::vector<Element> elems;
  for (uint32_t i = 0; i < 1000; ++i) elems.push_back(Element{Host32(i)});
  tx.Add(Elements{"s", elems});
  auto msgs = EncodeOps(tx, 1);
  ASSERT_TRUE(msgs.ok());
  EXPECT_GT(msgs->size(), 1u);
  TableState got;
  for (const auto& m : *msgs) {
    EXPECT_EQ(m.op, 0u);
    const std::string dumped = AsDumped(m.bytes);
    ASSERT_TRUE(DecodeMessage(reinterpret_cast<const nlmsghdr*>(dumped.data()), &got).ok());
  }
  EXPECT_EQ(got.elements["s"], elems);
}

TEST(NftCodec, OpsThatCannotBeExpressedAreRefusedByName) {
  Transaction tx(Family::kInet, "wtest");
  tx.Add(Rule{"", {Verdict{NF_ACCEPT, ""}}});
  auto msgs = EncodeOps(tx, 1);
  ASSERT_FALSE(msgs.ok());
  EXPECT_TRUE(msgs.status().IsInvalidArgument());
  EXPECT_NE(msgs.status().msg().find("a rule without a chain"), std::string::npos) << msgs.status().msg();
  Transaction del(Family::kInet, "wtest");
  del.Delete(Rule{"c", {}});
  EXPECT_FALSE(EncodeOps(del, 1).ok());  // a rule is deleted by its handle
  Transaction jump(Family::kInet, "wtest");
  jump.Add(Elements{"m", {Element{Be16(1), "", "", Verdict{NFT_JUMP, ""}}}});
  EXPECT_TRUE(EncodeOps(jump, 1).status().IsInvalidArgument());  // libnftnl would misread it
}

TEST(NftCodec, DecodingSkipsOtherSubsystemsAndRefusesTruncatedMessages) {
  TableState t;
  nlmsghdr h{};
  h.nlmsg_len = 200;  // longer than the buffer
  std::string b(reinterpret_cast<const char*>(&h), sizeof h);
  Status st = DecodeMessages(b.data(), b.size(), &t);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.reason(), Reason::kMalformed);
}

std::string Unhex(const std::string& h) {
  std::string b;
  for (size_t i = 0; i + 1 < h.size(); i += 2) b.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return b;
}

TEST(NftCodec, AStringAttributeWithoutItsNulStaysInsideTheMessage) {
  // A set whose name runs to the end of its attribute without a NUL (found
  // by fuzzing the raw decoder: libnftnl strdup()s it, and read past the
  // message before DecodeMessage gave it a zero-padded copy). Under ASan
  // (build-san) an overread fails this test.
  const std::string msg = Unhex(
      "68000000090a01040500000000000000010000000a000100776675ffffffffffffffffffffffffffffffffffffffffff"
      "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
      "ffffffffffffffffffffffffffffff7a7a0000000700020063320000080003000000008408000400000001e908000500"
      "0000001408000a0000000005200009801c0002800c00018008000100000000040c0001800800010000000010");
  TableState t;
  // Decoded or refused, but read inside the buffer.
  (void)DecodeMessages(msg.data(), msg.size(), &t);
  (void)RenderTable(t);
}

TEST(NftRender, RulesReadAsNftListsThem) {
  const Transaction tx = Everything();
  std::vector<std::string> rules;
  for (const Op& op : tx.ops())
    if (const auto* r = std::get_if<Rule>(&op.object)) rules.push_back(RenderRule(Family::kInet, *r));
  ASSERT_EQ(rules.size(), 13u);
  EXPECT_EQ(rules[0], "udp dport 8472 jump vxlan comment \"weft-overlay:abc\"");
  EXPECT_EQ(rules[1], "ip saddr != @peers4 counter name \"dropped\" drop");
  EXPECT_EQ(rules[2], "ip saddr . iifname @pods4-on counter packets 0 bytes 0 return");
  EXPECT_EQ(rules[3], "ct state established,related accept");
  EXPECT_EQ(rules[4], "tcp dport vmap @ports");
  EXPECT_EQ(rules[5], "limit rate 10/minute log prefix \"weft: \" group 3 snaplen 128 queue-threshold 1 drop");
  EXPECT_EQ(rules[6], "ip saddr 10.0.0.1 numgen inc mod 2 0 dnat ip to 10.1.0.1:80");
  EXPECT_EQ(rules[7], "masquerade fully-random");
  EXPECT_EQ(rules[8], "limit name \"log-rate\" counter name \"seen\" accept");
  EXPECT_EQ(rules[9], "fib daddr type local meta mark set meta mark | 0x00002000");
  EXPECT_EQ(rules[10], "meta l4proto tcp reject with tcp reset");
  EXPECT_EQ(rules[11], "reject");
  EXPECT_EQ(rules[12], "update @affinity { ip saddr }");
  EXPECT_EQ(RenderRule(Family::kInet, Rule{"c", {Reject{NFT_REJECT_ICMPX_UNREACH, NFT_REJECT_ICMPX_HOST_UNREACH}}}),
            "reject with icmpx host-unreachable");
  EXPECT_EQ(RenderRule(Family::kIp, Rule{"c", {Reject{NFT_REJECT_ICMP_UNREACH, 3}}}), "reject");
  // In an ip table there is no nfproto dependency to leave out.
  Rule r{"c", {Payload{NFT_PAYLOAD_NETWORK_HEADER, 16, 4, NFT_REG_1}, Cmp{NFT_CMP_NEQ, V4("10.0.0.2"), NFT_REG_1}}};
  EXPECT_EQ(RenderRule(Family::kIp, r), "ip daddr != 10.0.0.2");
  // A dependency nothing uses is printed, and a raw field stays raw.
  Rule raw{"c",
           {Meta{NFT_META_L4PROTO, NFT_REG_1}, Cmp{NFT_CMP_EQ, U8(IPPROTO_UDP), NFT_REG_1},
            Payload{NFT_PAYLOAD_TRANSPORT_HEADER, 28, 2, NFT_REG_1}, Cmp{NFT_CMP_EQ, Be16(0x86dd), NFT_REG_1}}};
  EXPECT_EQ(RenderRule(Family::kInet, raw), "meta l4proto udp @th,224,16 0x86dd");
  // A prefix match.
  Rule pfx{"c", {Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG_1},
                 Bitwise{NFT_REG_1, NFT_REG_1, 4, V4("255.255.255.0"), Host32(0)}, Cmp{NFT_CMP_EQ, V4("10.9.8.0"), NFT_REG_1}}};
  EXPECT_EQ(RenderRule(Family::kIp, pfx), "ip saddr 10.9.8.0/24");
}

TEST(NftRender, TableReadsAsNftListTable) {
  Transaction tx(Family::kInet, "wtest");
  tx.Add(Table{"wtest"});
  tx.Add(Ranges());
  tx.Add(PodsOn());
  tx.Add(Vmap());
  tx.Add(Chain{"other", std::nullopt});
  tx.Add(Chain{"input", Hook{NF_INET_LOCAL_IN, -10, "filter", "", NF_ACCEPT}});
  tx.Add(Rule{"input", UdpDport(8472) + std::vector<Expr>{Verdict{NFT_JUMP, "other"}}, "x"});
  tx.Add(Elements{"ranges", {Element{V4("10.0.0.0")}, Element{V4("10.0.1.0"), "", "", std::nullopt, NFT_SET_ELEM_INTERVAL_END},
                             Element{V4("10.0.5.1")}, Element{V4("10.0.5.4"), "", "", std::nullopt, NFT_SET_ELEM_INTERVAL_END}}});
  tx.Add(Elements{"pods4-on", {Element{V4("10.2.0.0") + Ifname("up0"), V4("10.2.0.255") + Ifname("up0")}}});
  tx.Add(Elements{"ports", {Element{Be16(22), "", "", Verdict{NFT_JUMP, "other"}}}});
  Fake fake;
  ASSERT_TRUE(fake.Apply(tx).ok());
  auto t = fake.Dump(Family::kInet, "wtest");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(RenderTable(*t),
            "table inet wtest {\n"
            "\tset ranges {\n\t\ttype ipv4_addr\n\t\tflags interval\n"
            "\t\telements = { 10.0.0.0/24, 10.0.5.1-10.0.5.3 }\n\t}\n\n"
            "\tset pods4-on {\n\t\ttype ipv4_addr . ifname\n\t\tflags interval\n"
            "\t\telements = { 10.2.0.0/24 . \"up0\" }\n\t}\n\n"
            "\tmap ports {\n\t\ttype inet_service : verdict\n\t\telements = { 22 : jump other }\n\t}\n\n"
            "\tchain other {\n\t}\n\n"
            "\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n"
            "\t\tudp dport 8472 jump other comment \"x\"\n\t}\n"
            "}\n");
  const std::string script = RenderTransaction(tx);
  EXPECT_NE(script.find("add table inet wtest\n"), std::string::npos) << script;
  EXPECT_NE(script.find("add set inet wtest pods4-on { type ipv4_addr . ifname; flags interval; }\n"), std::string::npos)
      << script;
  EXPECT_NE(script.find("add chain inet wtest input { type filter hook input priority filter - 10; policy accept; }\n"),
            std::string::npos)
      << script;
  EXPECT_NE(script.find("add element inet wtest ports { 22 : jump other }\n"), std::string::npos) << script;
  // A netdev ingress chain names its device.
  Transaction nd(Family::kNetdev, "wnd");
  nd.Add(Chain{"in", Hook{NF_NETDEV_INGRESS, 0, "filter", "eth0", NF_DROP}});
  EXPECT_EQ(RenderTransaction(nd),
            "add chain netdev wnd in { type filter hook ingress device \"eth0\" priority filter; policy drop; }\n");
}

// As nft 1.0.6 lists a set `update @set` writes to (the kernel adds "size 65535", which the layer does not model).
TEST(NftRender, ADynamicSetWithATimeout) {
  Transaction tx(Family::kInet, "wtest");
  tx.Add(Table{"wtest"}).Add(Affinity());
  Fake fake;
  ASSERT_TRUE(fake.Apply(tx).ok());
  auto t = fake.Dump(Family::kInet, "wtest");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(RenderTable(*t), "table inet wtest {\n\tset affinity {\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n"
                             "\t\ttimeout 3h\n\t}\n}\n");
}

TEST(NftRender, TheExampleOfDocsNftablesMd) {
  Transaction tx(Family::kInet, "weft-example");
  tx.Add(Table{"weft-example"});
  tx.Add(Set{"peers4", 0, kTypeIpv4, 4});
  tx.Add(Chain{"input", Hook{NF_INET_LOCAL_IN, -10, "filter", "", NF_ACCEPT}});
  tx.Flush(Chain{"input", std::nullopt});
  tx.Add(Rule{"input", {Meta{NFT_META_NFPROTO, NFT_REG_1}, Cmp{NFT_CMP_EQ, "\x02", NFT_REG_1},
                        Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG_1},
                        Lookup{"peers4", NFT_REG_1, std::nullopt, /*invert=*/true}, Verdict{NF_DROP, ""}}});
  EXPECT_EQ(RenderTransaction(tx),
            "add table inet weft-example\n"
            "add set inet weft-example peers4 { type ipv4_addr; }\n"
            "add chain inet weft-example input { type filter hook input priority filter - 10; policy accept; }\n"
            "flush chain inet weft-example input\n"
            "add rule inet weft-example input ip saddr != @peers4 drop\n");
  Fake fake;
  EXPECT_TRUE(fake.Apply(tx).ok());
  Transaction bad(Family::kInet, "weft-example");
  bad.Add(Rule{"missing", {Verdict{NF_ACCEPT, ""}}});
  EXPECT_EQ(fake.Apply(bad).ToString(),
            "firewall/not-found: nftables: add rule inet weft-example missing accept (nothing of the transaction was "
            "applied) (No such file or directory)");
}

class NftFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Transaction tx(Family::kInet, "wtest");
    tx.Add(Table{"wtest"}).Add(Peers4()).Add(Vmap()).Add(NamedCounter{"dropped"});
    tx.Add(Chain{"target", std::nullopt});
    tx.Add(Chain{"input", Hook{NF_INET_LOCAL_IN, 0, "filter", "", NF_ACCEPT}});
    tx.Add(Rule{"input", {Verdict{NFT_JUMP, "target"}}});
    ASSERT_TRUE(fake_.Apply(tx).ok());
    before_ = *fake_.Dump(Family::kInet, "wtest");
  }
  // Applies `tx`; expects it to fail with `err`, the op `names` in the
  // message, and the table left as it was.
  void ExpectRefused(const Transaction& tx, int err, const std::string& names) {
    Status st = fake_.Apply(tx);
    ASSERT_FALSE(st.ok()) << RenderTransaction(tx);
    EXPECT_EQ(st.sys_errno(), err) << st.ToString();
    EXPECT_EQ(st.domain(), Domain::kFirewall);
    EXPECT_NE(st.msg().find(names), std::string::npos) << st.msg();
    EXPECT_NE(st.msg().find("nothing of the transaction was applied"), std::string::npos) << st.msg();
    auto now = fake_.Dump(Family::kInet, "wtest");
    ASSERT_TRUE(now.ok());
    EXPECT_EQ(*now, before_);
  }
  Transaction Tx() { return Transaction(Family::kInet, "wtest"); }
  Fake fake_;
  TableState before_;
};

TEST_F(NftFakeTest, AFailingOpRefusesTheWholeTransactionAndIsNamed) {
  Transaction tx = Tx();
  tx.Add(Elements{"peers4", {Element{V4("192.0.2.9")}}});
  tx.Add(Rule{"missing", {Verdict{NF_ACCEPT, ""}}});
  ExpectRefused(tx, ENOENT, "add rule inet wtest missing accept");
  EXPECT_TRUE(fake_.Apply(tx).IsNotFound());
  EXPECT_EQ(fake_.committed().size(), 1u);
  EXPECT_EQ(fake_.failed(), 2);
}

TEST_F(NftFakeTest, ExistenceSemanticsMatchTheKernel) {
  ExpectRefused(Tx().Create(Table{"wtest"}), EEXIST, "create table inet wtest");
  ExpectRefused(Tx().Create(Chain{"target", std::nullopt}), EEXIST, "create chain");
  ExpectRefused(Tx().Add(Chain{"input", Hook{NF_INET_FORWARD, 0, "filter", "", NF_ACCEPT}}), EEXIST, "add chain");
  ExpectRefused(Tx().Delete(Chain{"nope", std::nullopt}), ENOENT, "delete chain inet wtest nope");
  ExpectRefused(Tx().Delete(Chain{"target", std::nullopt}), EBUSY, "delete chain inet wtest target");
  ExpectRefused(Tx().Flush(Chain{"nope", std::nullopt}), ENOENT, "flush chain inet wtest nope");
  ExpectRefused(Tx().Add(Rule{"input", {Verdict{NFT_JUMP, "nope"}}}), ENOENT, "jump nope");
  ExpectRefused(Tx().Add(Rule{"target", {Verdict{NFT_JUMP, "input"}}}), EOPNOTSUPP, "jump input");
  ExpectRefused(Tx().Add(Rule{"target", {Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, 1}, Lookup{"nope", 1}}}), ENOENT,
                "@nope");
  ExpectRefused(Tx().Add(Rule{"target", {CounterRef{"nope"}}}), ENOENT, "counter name");
  // `update @s` needs a set that exists and is dynamic.
  ExpectRefused(Tx().Add(Rule{"target", {Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, 1}, Dynset{NFT_DYNSET_OP_UPDATE, "nope", 1}}}),
                ENOENT, "update @nope");
  ExpectRefused(Tx().Add(Rule{"target", {Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, 1}, Dynset{NFT_DYNSET_OP_UPDATE, "peers4", 1}}}),
                EOPNOTSUPP, "update @peers4");
  ExpectRefused(Tx().Add(Set{"peers4", NFT_SET_INTERVAL, kTypeIpv4, 4}), EEXIST, "add set inet wtest peers4");
  ExpectRefused(Tx().Delete(Set{"nope"}), ENOENT, "delete set");
  ExpectRefused(Tx().Add(Elements{"nope", {Element{V4("10.0.0.1")}}}), ENOENT, "add element inet wtest nope");
  ExpectRefused(Tx().Add(Elements{"peers4", {Element{V6("2001:db8::1")}}}), EINVAL, "add element");
  ExpectRefused(Tx().Add(Elements{"peers4", {Element{V4("10.0.0.1"), "", "", std::nullopt, 0, 1000}}}), EINVAL,
                "timeout");
  ExpectRefused(Tx().Add(Elements{"ports", {Element{Be16(22)}}}), EINVAL, "add element inet wtest ports");
  ExpectRefused(Tx().Add(Elements{"ports", {Element{Be16(22), "", "", Verdict{NFT_JUMP, "nope"}}}}), ENOENT,
                "jump nope");
  ExpectRefused(Tx().Delete(Elements{"peers4", {Element{V4("10.0.0.1")}}}), ENOENT, "delete element");
  ExpectRefused(Tx().Add(Chain{"c", std::nullopt}).Delete(Table{"other"}), EINVAL, "delete table inet other");
  // A table that does not exist: every object in it is ENOENT.
  Transaction other(Family::kIp, "wtest");
  other.Add(Chain{"c", std::nullopt});
  EXPECT_EQ(fake_.Apply(other).sys_errno(), ENOENT);
  EXPECT_TRUE(fake_.Dump(Family::kIp, "wtest").status().IsNotFound());
}

// The kernel's naming of anonymous sets, and their life: the lowest
// "__set<N>" free, gone with the last rule that looks them up, their
// elements fixed once the transaction that made them is committed.
TEST(NftFakeAnonymous, NamedAsTheKernelNamesThemAndGoneWithTheirRule) {
  Fake fake;
  auto anon = [](const std::string& name, uint16_t port) {
    return std::vector<Object>{Set{name, NFT_SET_ANONYMOUS | NFT_SET_CONSTANT, kTypeInetService, 2},
                               Elements{name, {Element{Be16(port)}}}};
  };
  auto rule = [](const std::string& chain, const std::string& set) {
    return Rule{chain, {Payload{NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1}, Lookup{set, NFT_REG_1}, Verdict{NF_DROP, ""}}};
  };
  Transaction tx(Family::kInet, "wtest");
  tx.Add(Table{"wtest"}).Add(Chain{"a", std::nullopt}).Add(Chain{"b", std::nullopt});
  for (auto& o : anon("__set_x", 22)) tx.Add(o);
  tx.Add(rule("a", "__set_x"));
  for (auto& o : anon("__set_y", 80)) tx.Add(o);
  tx.Add(rule("b", "__set_y"));
  ASSERT_TRUE(fake.Apply(tx).ok());
  auto t = fake.Dump(Family::kInet, "wtest");
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->sets.size(), 2u);
  EXPECT_EQ(t->sets[0].name, "__set0");
  EXPECT_EQ(t->sets[1].name, "__set1");
  EXPECT_EQ(std::get<Lookup>(t->rules[1].exprs[1]).set, "__set1");
  EXPECT_EQ(t->elements["__set1"], std::vector<Element>{Element{Be16(80)}});
  EXPECT_NE(RenderTable(*t).find("th dport { 80 } drop"), std::string::npos) << RenderTable(*t);
  // Chain a refilled: its set goes with the old rule, the new one takes __set0.
  Transaction refill(Family::kInet, "wtest");
  refill.Flush(Chain{"a", std::nullopt});
  for (auto& o : anon("__set_z", 443)) refill.Add(o);
  refill.Add(rule("a", "__set_z"));
  ASSERT_TRUE(fake.Apply(refill).ok());
  t = fake.Dump(Family::kInet, "wtest");
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->sets.size(), 2u);
  EXPECT_EQ(t->elements["__set0"], std::vector<Element>{Element{Be16(443)}});
  // A committed anonymous set takes no more elements.
  Transaction more(Family::kInet, "wtest");
  more.Add(Elements{"__set1", {Element{Be16(81)}}});
  EXPECT_EQ(fake.Apply(more).sys_errno(), EBUSY);
  Transaction gone(Family::kInet, "wtest");
  gone.Flush(Table{"wtest"});
  ASSERT_TRUE(fake.Apply(gone).ok());
  EXPECT_TRUE(fake.Dump(Family::kInet, "wtest")->sets.empty());
}

TEST_F(NftFakeTest, IdempotentAddsDestroysAndFlushes) {
  Transaction tx = Tx();
  tx.Add(Table{"wtest"}).Add(Chain{"target", std::nullopt}).Add(Peers4());
  tx.Add(Elements{"peers4", {Element{V4("10.0.0.1")}}}).Add(Elements{"peers4", {Element{V4("10.0.0.1")}}});
  tx.Destroy(Chain{"nope", std::nullopt}).Destroy(Set{"nope"}).Destroy(Elements{"peers4", {Element{V4("10.9.9.9")}}});
  // A policy change on the existing base chain is an update.
  tx.Add(Chain{"input", Hook{NF_INET_LOCAL_IN, 0, "filter", "", NF_DROP}});
  ASSERT_TRUE(fake_.Apply(tx).ok());
  auto t = fake_.Dump(Family::kInet, "wtest");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->elements["peers4"].size(), 1u);
  EXPECT_EQ(t->chains[1].hook->policy, static_cast<uint32_t>(NF_DROP));
  // An element again with other data, or as create, is EEXIST.
  Transaction v = Tx();
  v.Add(Elements{"ports", {Element{Be16(22), "", "", Verdict{NF_ACCEPT, ""}}}});
  ASSERT_TRUE(fake_.Apply(v).ok());
  before_ = *fake_.Dump(Family::kInet, "wtest");
  ExpectRefused(Tx().Add(Elements{"ports", {Element{Be16(22), "", "", Verdict{NF_DROP, ""}}}}), EEXIST, "22 : drop");
  ExpectRefused(Tx().Create(Elements{"ports", {Element{Be16(22), "", "", Verdict{NF_ACCEPT, ""}}}}), EEXIST,
                "create element");
  // The verdict map now jumps nowhere but input's rule jumps to target:
  // flush input, and target can go.
  Transaction f = Tx();
  f.Flush(Chain{"input", std::nullopt}).Delete(Chain{"target", std::nullopt}).Flush(Set{"peers4"});
  ASSERT_TRUE(fake_.Apply(f).ok());
  t = fake_.Dump(Family::kInet, "wtest");
  EXPECT_TRUE(t->rules.empty());
  EXPECT_EQ(t->chains.size(), 1u);
  EXPECT_EQ(t->elements.count("peers4"), 0u);
  // Rules get handles; delete by handle.
  ASSERT_TRUE(fake_.Apply(Tx().Add(Rule{"input", {Verdict{NF_ACCEPT, ""}}})).ok());
  t = fake_.Dump(Family::kInet, "wtest");
  ASSERT_EQ(t->rules.size(), 1u);
  ASSERT_NE(t->rules[0].handle, 0u);
  ASSERT_TRUE(fake_.Apply(Tx().Delete(Rule{"input", {}, "", t->rules[0].handle})).ok());
  EXPECT_TRUE(fake_.Dump(Family::kInet, "wtest")->rules.empty());
  // The table goes with everything in it; destroying it again is no error.
  ASSERT_TRUE(fake_.Apply(Tx().Delete(Table{"wtest"})).ok());
  EXPECT_TRUE(fake_.Dump(Family::kInet, "wtest").status().IsNotFound());
  EXPECT_TRUE(fake_.Apply(Tx().Destroy(Table{"wtest"})).ok());
}

}  // namespace
}  // namespace weft::sys::nft
