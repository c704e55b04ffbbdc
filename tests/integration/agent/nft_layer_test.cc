// The typed nftables layer (sys/nft_kernel.h) against the kernel, in a
// network namespace the test creates: a transaction of every kind of object
// commits as one batch, the dump reads back the same typed objects, the
// renderer prints exactly what `nft list table` prints for it, and a batch
// with one bad op is refused whole with that op named.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <netinet/in.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sys/kernel_events.h"
#include "sys/netns.h"
#include "sys/nft_build.h"
#include "sys/nft_fake.h"
#include "sys/nft_kernel.h"
#include "sys/nft_render.h"
#include "testutil/netns_fixture.h"

namespace weft::sys::nft {
namespace {

using weft::testing::TestNetns;

constexpr char kTable[] = "wnftlayer";

std::string V4(const char* a) { return AddrBytes(a); }
std::string V6(const char* a) { return AddrBytes(a); }
std::string Ifname(const std::string& n) { return IfnameBytes(n); }
std::vector<Expr> Cat(std::vector<Expr> a, const std::vector<Expr>& b) { return Then(std::move(a), b); }
std::vector<Expr> Ip4() { return MatchNfproto(NFPROTO_IPV4); }
std::vector<Expr> L4(uint8_t p) { return MatchL4proto(p); }
Payload Dport() { return Payload{NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1}; }

Set Peers4() { return Set{"peers4", 0, kTypeIpv4, 4}; }
Set Ranges() { return Set{"ranges", NFT_SET_INTERVAL, kTypeIpv4, 4}; }
Set PodsOn() {
  return Set{"pods4-on", NFT_SET_INTERVAL | NFT_SET_CONCAT, ConcatType({kTypeIpv4, kTypeIfname}), 20, 0, 0, {4, 16}};
}

// What Weft writes, one of each: the objects of the probe table the
// renderer's expected text below was taken from (nft 1.0.6's own output).
Transaction Build() {
  Transaction tx(Family::kInet, kTable);
  tx.Add(Table{kTable});
  tx.Add(NamedCounter{"c1"});
  tx.Add(Peers4()).Add(Ranges()).Add(PodsOn());
  tx.Add(Set{"ports", NFT_SET_MAP, kTypeInetService, 2, kTypeVerdict, 0});
  tx.Add(Set{"recent", NFT_SET_TIMEOUT, kTypeIpv6, 16, 0, 0, {}, 30000});
  tx.Add(Set{"backends", NFT_SET_MAP, kTypeInetService, 2, kTypeIpv4, 4});
  tx.Add(Chain{"other", std::nullopt});
  tx.Add(Chain{"input", Hook{NF_INET_LOCAL_IN, -10, "filter", "", NF_ACCEPT}});
  tx.Add(Chain{"post", Hook{NF_INET_POST_ROUTING, 100, "nat", "", NF_ACCEPT}});
  tx.Add(Chain{"nat", Hook{NF_INET_PRE_ROUTING, -100, "nat", "", NF_ACCEPT}});
  tx.Add(Rule{"input", Cat(L4(IPPROTO_UDP), {Dport(), Cmp{NFT_CMP_EQ, Be16(8472), 1}, Verdict{NFT_JUMP, "other"}}), "x"});
  tx.Add(Rule{"input", Cat(Ip4(), {Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, 1}, Lookup{"peers4", 1, std::nullopt, true},
                                   CounterRef{"c1"}, Verdict{NF_DROP, ""}})});
  tx.Add(Rule{"input", Cat(Ip4(), {Payload{NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG32_00},
                                   Meta{NFT_META_IIFNAME, NFT_REG32_01}, Lookup{"pods4-on", NFT_REG32_00},
                                   Counter{}, Verdict{NFT_RETURN, ""}})});
  tx.Add(Rule{"input",
              {Ct{NFT_CT_STATE, 1, std::nullopt},
               Bitwise{1, 1, 4, Host32(NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED)), Host32(0)},
               Cmp{NFT_CMP_NEQ, Host32(0), 1}, Verdict{NF_ACCEPT, ""}}});
  tx.Add(Rule{"input", Cat(L4(IPPROTO_TCP), {Dport(), Lookup{"ports", 1, NFT_REG_VERDICT}})});
  tx.Add(Rule{"input", {Limit{10, 60, 5, NFT_LIMIT_PKTS, false}, Log{"weft: ", 3, 128, 1}, Verdict{NF_DROP, ""}}});
  tx.Add(Rule{"input", Cat(L4(IPPROTO_UDP), {Payload{NFT_PAYLOAD_TRANSPORT_HEADER, 28, 2, 1},
                                             Cmp{NFT_CMP_EQ, Be16(0x86dd), 1}})});
  tx.Add(Rule{"input", Cat(Ip4(), {Payload{NFT_PAYLOAD_NETWORK_HEADER, 16, 4, 1},
                                   Bitwise{1, 1, 4, V4("255.255.255.0"), Host32(0)}, Cmp{NFT_CMP_EQ, V4("10.9.8.0"), 1},
                                   Verdict{NF_ACCEPT, ""}})});
  tx.Add(Rule{"post", {Meta{NFT_META_OIFNAME, 1}, Cmp{NFT_CMP_EQ, Ifname("eth0"), 1},
                       Nat{0, true, 0, 0, 0, NF_NAT_RANGE_PROTO_RANDOM_FULLY}}});
  tx.Add(Rule{"nat", Cat(Cat(Ip4(), {Payload{NFT_PAYLOAD_NETWORK_HEADER, 16, 4, 1}, Cmp{NFT_CMP_EQ, V4("10.9.9.9"), 1}}),
                         Cat(L4(IPPROTO_TCP), {Dport(), Cmp{NFT_CMP_EQ, Be16(80), 1}, Immediate{1, V4("10.1.0.1")},
                                               Immediate{2, Be16(8080)}, Nat{NFT_NAT_DNAT, false, NFPROTO_IPV4, 1, 2, 0}}))});
  tx.Add(Rule{"nat", {Numgen{NFT_NG_INCREMENTAL, 2, 0, 1}, Cmp{NFT_CMP_EQ, Host32(0), 1}, Immediate{1, V4("10.1.0.2")},
                      Nat{NFT_NAT_DNAT, false, NFPROTO_IPV4, 1, 0, 0}}});
  tx.Add(Elements{"peers4", {Element{V4("192.0.2.1")}, Element{V4("192.0.2.2")}}});
  tx.Add(Elements{"ranges", {Element{V4("10.0.0.0")}, Element{V4("10.0.1.0"), "", "", std::nullopt, NFT_SET_ELEM_INTERVAL_END},
                             Element{V4("10.0.5.1")}, Element{V4("10.0.5.4"), "", "", std::nullopt, NFT_SET_ELEM_INTERVAL_END}}});
  tx.Add(Elements{"pods4-on", {Element{V4("10.2.0.0") + Ifname("up0"), V4("10.2.0.255") + Ifname("up0")}}});
  tx.Add(Elements{"ports", {Element{Be16(22), "", "", Verdict{NFT_JUMP, "other"}}}});
  tx.Add(Elements{"backends", {Element{Be16(80), "", V4("10.3.0.1")}}});
  return tx;
}

// `nft list table inet wnftlayer` of Build() (nft 1.0.6, Debian 12).
const char kListed[] =
    "table inet wnftlayer {\n"
    "\tcounter c1 {\n\t\tpackets 0 bytes 0\n\t}\n\n"
    "\tset peers4 {\n\t\ttype ipv4_addr\n\t\telements = { 192.0.2.1, 192.0.2.2 }\n\t}\n\n"
    "\tset ranges {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 10.0.0.0/24, 10.0.5.1-10.0.5.3 }\n\t}\n\n"
    "\tset pods4-on {\n\t\ttype ipv4_addr . ifname\n\t\tflags interval\n\t\telements = { 10.2.0.0/24 . \"up0\" }\n\t}\n\n"
    "\tmap ports {\n\t\ttype inet_service : verdict\n\t\telements = { 22 : jump other }\n\t}\n\n"
    "\tset recent {\n\t\ttype ipv6_addr\n\t\ttimeout 30s\n\t}\n\n"
    "\tmap backends {\n\t\ttype inet_service : ipv4_addr\n\t\telements = { 80 : 10.3.0.1 }\n\t}\n\n"
    "\tchain other {\n\t}\n\n"
    "\tchain input {\n"
    "\t\ttype filter hook input priority filter - 10; policy accept;\n"
    "\t\tudp dport 8472 jump other comment \"x\"\n"
    "\t\tip saddr != @peers4 counter name \"c1\" drop\n"
    "\t\tip saddr . iifname @pods4-on counter packets 0 bytes 0 return\n"
    "\t\tct state established,related accept\n"
    "\t\ttcp dport vmap @ports\n"
    "\t\tlimit rate 10/minute log prefix \"weft: \" group 3 snaplen 128 queue-threshold 1 drop\n"
    "\t\tmeta l4proto udp @th,224,16 0x86dd\n"
    "\t\tip daddr 10.9.8.0/24 accept\n"
    "\t}\n\n"
    "\tchain post {\n"
    "\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
    "\t\toifname \"eth0\" masquerade fully-random\n"
    "\t}\n\n"
    "\tchain nat {\n"
    "\t\ttype nat hook prerouting priority dstnat; policy accept;\n"
    "\t\tip daddr 10.9.9.9 tcp dport 80 dnat ip to 10.1.0.1:8080\n"
    "\t\tnumgen inc mod 2 0 dnat ip to 10.1.0.2\n"
    "\t}\n"
    "}\n";

class NftLayerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = std::make_unique<TestNetns>("nftlayer");
    std::string out;
    ASSERT_EQ(ns_->Exec({"ip", "link", "add", "wv0", "type", "veth", "peer", "name", "wv1"}, &out), 0) << out;
  }
  Status Apply(const Transaction& tx) {
    auto h = sys::Netns::Open(ns_->path());
    if (!h.ok()) return h.status();
    return sys::RunInNetns(*h, [&] { return Kernel().Apply(tx); });
  }
  Result<TableState> Dump(Family f, const std::string& table) {
    auto h = sys::Netns::Open(ns_->path());
    if (!h.ok()) return h.status();
    Result<TableState> r = OpError("not run", EINVAL);
    Status st = sys::RunInNetns(*h, [&] {
      r = Kernel().Dump(f, table);
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return r;
  }
  std::string List(const std::string& family, const std::string& table) {
    std::string out;
    EXPECT_EQ(ns_->Exec({"nft", "list", "table", family, table}, &out), 0) << out;
    return out;
  }
  std::unique_ptr<TestNetns> ns_;
};

// Handles and element order are the kernel's: compared without them.
TableState Normal(TableState t) {
  for (auto& r : t.rules) r.handle = 0;
  for (auto& [set, elems] : t.elements)
    std::sort(elems.begin(), elems.end(), [](const Element& a, const Element& b) {
      return std::tie(a.key, a.flags) < std::tie(b.key, b.flags);
    });
  return t;
}

TEST_F(NftLayerTest, ATransactionCommitsAndReadsBackAsTheSameObjectsAndNftsText) {
  const Transaction tx = Build();
  Status st = Apply(tx);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto dump = Dump(Family::kInet, kTable);
  ASSERT_TRUE(dump.ok()) << dump.status().ToString();

  // The same objects as the fake holds after the same transaction.
  Fake fake;
  ASSERT_TRUE(fake.Apply(tx).ok());
  const TableState want = Normal(*fake.Dump(Family::kInet, kTable));
  const TableState got = Normal(*dump);
  EXPECT_EQ(got.table, want.table);
  EXPECT_EQ(got.chains, want.chains);
  EXPECT_EQ(got.sets, want.sets);
  EXPECT_EQ(got.counters, want.counters);
  EXPECT_EQ(got.elements, want.elements);
  ASSERT_EQ(got.rules.size(), want.rules.size());
  for (size_t i = 0; i < want.rules.size(); ++i)
    for (size_t j = 0; j < std::max(got.rules[i].exprs.size(), want.rules[i].exprs.size()); ++j)
      EXPECT_TRUE(j < got.rules[i].exprs.size() && j < want.rules[i].exprs.size() &&
                  got.rules[i].exprs[j] == want.rules[i].exprs[j])
          << "rule " << i << " expr " << j << " (kind " << (j < got.rules[i].exprs.size() ? got.rules[i].exprs[j].index() : 99)
          << "): " << RenderRule(Family::kInet, got.rules[i]);
  for (const auto& r : dump->rules) EXPECT_NE(r.handle, 0u);

  // Rendered, the dump is what nft lists, and what the test expects.
  const std::string listed = List("inet", kTable);
  EXPECT_EQ(RenderTable(*dump), listed);
  EXPECT_EQ(listed, kListed);

  // A netdev ingress chain on a device; then the tables go.
  Transaction nd(Family::kNetdev, "wnftnd");
  nd.Add(Table{"wnftnd"}).Add(Chain{"ing", Hook{NF_NETDEV_INGRESS, 0, "filter", "wv0", NF_DROP}});
  st = Apply(nd);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto ndump = Dump(Family::kNetdev, "wnftnd");
  ASSERT_TRUE(ndump.ok()) << ndump.status().ToString();
  ASSERT_EQ(ndump->chains.size(), 1u);
  EXPECT_EQ(ndump->chains[0], (Chain{"ing", Hook{NF_NETDEV_INGRESS, 0, "filter", "wv0", NF_DROP}}));
  EXPECT_EQ(RenderTable(*ndump), List("netdev", "wnftnd"));

  ASSERT_TRUE(Apply(Transaction(Family::kInet, kTable).Delete(Table{kTable})).ok());
  ASSERT_TRUE(Apply(Transaction(Family::kNetdev, "wnftnd").Destroy(Table{"wnftnd"})).ok());
  EXPECT_TRUE(Dump(Family::kInet, kTable).status().IsNotFound());
  EXPECT_TRUE(Apply(Transaction(Family::kNetdev, "wnftnd").Destroy(Table{"wnftnd"})).ok());
}

// weftd tells its own commits from anyone else's by the port id its
// socket had (agent/keeper.h): the kernel's notifications of a batch carry
// that socket's port id, and Apply names it before it sends.
TEST_F(NftLayerTest, TheCommitsNotificationsCarryTheSendingSocketsPortId) {
  auto h = sys::Netns::Open(ns_->path());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::vector<KernelEvent> seen;
  std::vector<uint32_t> sent;
  Status st = sys::RunInNetns(*h, [&]() -> Status {
    WEFT_ASSIGN_OR_RETURN(auto events, KernelEvents::Open(1 << 20));
    Transaction make(Family::kInet, kTable);
    make.Add(Table{kTable}).Add(Chain{"c", std::nullopt});
    make.Add(Rule{"c", {Verdict{NF_ACCEPT, ""}}});
    auto note = [&](uint32_t p) { sent.push_back(p); };
    WEFT_RETURN_IF_ERROR(Kernel().Apply(make, nullptr, note));
    Transaction drop(Family::kInet, kTable);
    drop.Flush(Chain{"c", std::nullopt});
    WEFT_RETURN_IF_ERROR(Kernel().Apply(drop, nullptr, note));
    for (int i = 0; i < 20; ++i) {
      bool lost = false;
      WEFT_ASSIGN_OR_RETURN(auto got, events.Wait(std::chrono::milliseconds(50), &lost));
      if (lost) return Status::Error(Reason::kInternal, Domain::kNone, "notifications lost");
      seen.insert(seen.end(), got.begin(), got.end());
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_NE(sent[0], 0u);
  EXPECT_NE(sent[0], sent[1]);  // each Apply its own socket
  size_t added = 0, deleted = 0;
  for (const auto& e : seen) {
    if (e.table != kTable) continue;
    if (e.kind == KernelEvent::Kind::kNftRule && !e.deleted) {
      added++;
      EXPECT_EQ(e.portid, sent[0]);
    }
    if (e.kind == KernelEvent::Kind::kNftRule && e.deleted) {
      deleted++;
      EXPECT_EQ(e.portid, sent[1]);
    }
  }
  EXPECT_EQ(added, 1u);
  EXPECT_EQ(deleted, 1u);
  ASSERT_TRUE(Apply(Transaction(Family::kInet, kTable).Delete(Table{kTable})).ok());
}

// weftd sends a full NetworkPolicy table deaf (agent.h,
// DeafDuringFullSync): out of NFNLGRP_NFTABLES it hears nothing of a
// commit, back in it hears the next one.
TEST_F(NftLayerTest, LeavingTheNotificationGroupHearsNothingUntilRejoined) {
  auto h = sys::Netns::Open(ns_->path());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  size_t deaf = 0, hearing = 0;
  Status st = sys::RunInNetns(*h, [&]() -> Status {
    WEFT_ASSIGN_OR_RETURN(auto events, KernelEvents::Open(1 << 20));
    auto count = [&](size_t* n) -> Status {
      for (int i = 0; i < 10; ++i) {
        bool lost = false;
        WEFT_ASSIGN_OR_RETURN(auto got, events.Wait(std::chrono::milliseconds(30), &lost));
        for (const auto& e : got) *n += e.table == kTable;
      }
      return Status::Ok();
    };
    WEFT_RETURN_IF_ERROR(KernelEvents::SetNftListening(events.nft_fd(), false));
    Transaction make(Family::kInet, kTable);
    make.Add(Table{kTable}).Add(Chain{"c", std::nullopt}).Add(Rule{"c", {Verdict{NF_ACCEPT, ""}}});
    WEFT_RETURN_IF_ERROR(Kernel().Apply(make));
    WEFT_RETURN_IF_ERROR(count(&deaf));
    WEFT_RETURN_IF_ERROR(KernelEvents::SetNftListening(events.nft_fd(), true));
    Transaction more(Family::kInet, kTable);
    more.Add(Rule{"c", {Verdict{NF_ACCEPT, ""}}});
    WEFT_RETURN_IF_ERROR(Kernel().Apply(more));
    return count(&hearing);
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(deaf, 0u);
  EXPECT_EQ(hearing, 1u);  // the one rule added
  ASSERT_TRUE(Apply(Transaction(Family::kInet, kTable).Delete(Table{kTable})).ok());
}

TEST_F(NftLayerTest, AFailingOpRefusesTheWholeBatchAndIsNamed) {
  ASSERT_TRUE(Apply(Build()).ok());
  auto before = Dump(Family::kInet, kTable);
  ASSERT_TRUE(before.ok());
  const std::string listed = List("inet", kTable);

  // Good ops around one rule in a chain that does not exist.
  Transaction tx(Family::kInet, kTable);
  tx.Add(Elements{"peers4", {Element{V4("192.0.2.3")}}});
  tx.Add(Chain{"fresh", std::nullopt});
  tx.Add(Rule{"missing", {Verdict{NF_ACCEPT, ""}}, "bad"});
  tx.Flush(Chain{"input", std::nullopt});
  Status st = Apply(tx);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.sys_errno(), ENOENT) << st.ToString();
  EXPECT_TRUE(st.IsNotFound());
  EXPECT_NE(st.msg().find("add rule inet wnftlayer missing accept comment \"bad\""), std::string::npos) << st.msg();
  EXPECT_NE(st.msg().find("nothing of the transaction was applied"), std::string::npos) << st.msg();
  // The fake refuses the same transaction with the same errno and op.
  Fake fake;
  ASSERT_TRUE(fake.Apply(Build()).ok());
  Status fst = fake.Apply(tx);
  EXPECT_EQ(fst.sys_errno(), ENOENT);
  EXPECT_EQ(fst.msg(), st.msg());
  // Nothing of it is in the kernel.
  EXPECT_EQ(List("inet", kTable), listed);
  auto after = Dump(Family::kInet, kTable);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(Normal(*after), Normal(*before));

  // Other mistakes, each named with the kernel's errno, as the fake has them.
  struct Case {
    Transaction tx;
    int err;
    std::string names;
  };
  std::vector<Case> cases;
  cases.push_back({Transaction(Family::kInet, kTable).Create(Chain{"other", std::nullopt}), EEXIST,
                   "create chain inet wnftlayer other"});
  cases.push_back({Transaction(Family::kInet, kTable).Delete(Chain{"other", std::nullopt}), EBUSY,
                   "delete chain inet wnftlayer other"});
  cases.push_back({Transaction(Family::kInet, kTable).Delete(Set{"ranges"}).Delete(Set{"peers4"}), EBUSY,
                   "delete set inet wnftlayer peers4"});
  cases.push_back({Transaction(Family::kInet, kTable).Add(Elements{"peers4", {Element{V6("2001:db8::1")}}}), EINVAL,
                   "add element inet wnftlayer peers4"});
  cases.push_back({Transaction(Family::kInet, kTable).Add(Elements{"ports", {Element{Be16(22), "", "", Verdict{NF_DROP, ""}}}}),
                   EEXIST, "add element inet wnftlayer ports { 22 : drop }"});
  cases.push_back({Transaction(Family::kInet, kTable).Delete(Elements{"peers4", {Element{V4("10.0.0.9")}}}), ENOENT,
                   "delete element inet wnftlayer peers4 { 10.0.0.9 }"});
  cases.push_back({Transaction(Family::kInet, kTable).Add(Rule{"other", {Verdict{NFT_JUMP, "input"}}}), EOPNOTSUPP,
                   "add rule inet wnftlayer other jump input"});
  for (const auto& c : cases) {
    Status k = Apply(c.tx);
    Status f = fake.Apply(c.tx);
    EXPECT_EQ(k.sys_errno(), c.err) << k.ToString();
    EXPECT_EQ(f.sys_errno(), c.err) << f.ToString();
    EXPECT_NE(k.msg().find(c.names), std::string::npos) << k.msg();
    EXPECT_EQ(k.msg(), f.msg());
  }
  EXPECT_EQ(List("inet", kTable), listed);
}

TEST_F(NftLayerTest, ThousandsOfElementsInOneBatchAndTheirDump) {
  Transaction tx(Family::kInet, kTable);
  tx.Add(Table{kTable}).Add(Peers4());
  std::vector<Element> elems;
  for (uint32_t i = 1; i <= 5000; ++i) {
    const uint32_t be = htonl(0x0a000000u | i);
    elems.push_back(Element{std::string(reinterpret_cast<const char*>(&be), 4)});
  }
  tx.Add(Elements{"peers4", elems});
  Status st = Apply(tx);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto dump = Dump(Family::kInet, kTable);
  ASSERT_TRUE(dump.ok()) << dump.status().ToString();
  EXPECT_EQ(dump->elements["peers4"].size(), elems.size());
}

}  // namespace
}  // namespace weft::sys::nft
