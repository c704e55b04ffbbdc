#include "policy/drop_log.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include "sys/nflog.h"

namespace weft::policy {
namespace {

// An IPv4 header (20 bytes) and the first bytes of a transport header.
std::string Ip4(const char* src, const char* dst, uint8_t proto, uint16_t sport, uint16_t dport, uint16_t frag = 0) {
  std::string p(28, '\0');
  p[0] = 0x45;
  p[6] = static_cast<char>(frag >> 8);
  p[7] = static_cast<char>(frag & 0xff);
  p[9] = static_cast<char>(proto);
  inet_pton(AF_INET, src, p.data() + 12);
  inet_pton(AF_INET, dst, p.data() + 16);
  p[20] = static_cast<char>(sport >> 8);
  p[21] = static_cast<char>(sport & 0xff);
  p[22] = static_cast<char>(dport >> 8);
  p[23] = static_cast<char>(dport & 0xff);
  return p;
}

std::string Ip6(const char* src, const char* dst, uint8_t next, uint16_t sport, uint16_t dport) {
  std::string p(48, '\0');
  p[0] = 0x60;
  p[6] = static_cast<char>(next);
  inet_pton(AF_INET6, src, p.data() + 8);
  inet_pton(AF_INET6, dst, p.data() + 24);
  p[40] = static_cast<char>(sport >> 8);
  p[41] = static_cast<char>(sport & 0xff);
  p[42] = static_cast<char>(dport >> 8);
  p[43] = static_cast<char>(dport & 0xff);
  return p;
}

sys::NflogPacket Pkt(uint8_t family, const std::string& prefix, std::string payload, uint16_t hw = 0) {
  sys::NflogPacket p;
  p.family = family;
  p.prefix = prefix;
  p.payload = std::move(payload);
  p.hw_protocol = hw;
  p.indev = 7;
  return p;
}

TEST(Nflog, ParsesWhatTheKernelWritesAndSkipsTheRest) {
  sys::NflogPacket a = Pkt(AF_INET, "weft-np in", Ip4("10.0.2.1", "10.0.1.1", 6, 40000, 80), 0x0800);
  sys::NflogPacket b = Pkt(AF_BRIDGE, "weft-guard spoofed4", "\x00\x01\x08\x00", 0x0806);
  b.outdev = 9;
  std::string buf = sys::EncodeNflogPacket(a) + sys::EncodeNflogPacket(b);
  auto got = sys::ParseNflog(buf);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].prefix, "weft-np in");
  EXPECT_EQ((*got)[0].family, AF_INET);
  EXPECT_EQ((*got)[0].hw_protocol, 0x0800);
  EXPECT_EQ((*got)[0].indev, 7u);
  EXPECT_EQ((*got)[0].payload, a.payload);
  EXPECT_EQ((*got)[1].family, AF_BRIDGE);
  EXPECT_EQ((*got)[1].outdev, 9u);
  EXPECT_EQ((*got)[1].payload, b.payload);
  // A truncated second message ends the buffer; the first is kept.
  auto cut = sys::ParseNflog(std::string_view(buf).substr(0, buf.size() - 3));
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->size(), 1u);
  EXPECT_FALSE(sys::ParseNflog("abc").ok());
  EXPECT_TRUE(sys::ParseNflog("")->empty());
}

TEST(DropDecode, PolicyAndGuardPacketsBothFamilies) {
  auto ev = DecodeDrop(Pkt(AF_INET, "weft-np in", Ip4("10.0.2.1", "10.0.1.1", 6, 40000, 80)));
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->table, "netpol");
  EXPECT_EQ(ev->kind, "in");
  EXPECT_EQ(ev->src, "10.0.2.1");
  EXPECT_EQ(ev->dst, "10.0.1.1");
  EXPECT_EQ(ev->proto, "tcp");
  EXPECT_EQ(ev->dport, 80);
  ev = DecodeDrop(Pkt(AF_INET6, "weft-guard spoofed6", Ip6("fd00::9", "fd00::1:1", 17, 5353, 53)));
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->table, "guard");
  EXPECT_EQ(ev->kind, "spoofed6");
  EXPECT_EQ(ev->src, "fd00::9");
  EXPECT_EQ(ev->proto, "udp");
  EXPECT_EQ(ev->dport, 53);
  // Bridge family: the ethertype says what the payload is.
  ev = DecodeDrop(Pkt(AF_BRIDGE, "weft-guard spoofed4", Ip4("10.0.9.9", "10.0.1.1", 132, 1, 9), 0x0800));
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->proto, "sctp");
  EXPECT_EQ(ev->dport, 9);
  std::string arp(28, '\0');
  arp[1] = 1;
  arp[2] = 0x08;
  inet_pton(AF_INET, "10.0.1.2", arp.data() + 14);
  inet_pton(AF_INET, "10.0.1.1", arp.data() + 24);
  ev = DecodeDrop(Pkt(AF_BRIDGE, "weft-guard spoofed4", arp, 0x0806));
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->proto, "arp");
  EXPECT_EQ(ev->src, "10.0.1.2");
  // A later fragment has no ports; ICMP has none.
  ev = DecodeDrop(Pkt(AF_INET, "weft-np eg", Ip4("10.0.1.1", "10.0.2.1", 17, 1, 2, 0x0010)));
  EXPECT_EQ(ev->dport, 0);
  ev = DecodeDrop(Pkt(AF_INET, "weft-np eg", Ip4("10.0.1.1", "10.0.2.1", 1, 0x0800, 0)));
  EXPECT_EQ(ev->proto, "icmp");
  EXPECT_EQ(ev->dport, 0);
  // Not ours; garbage payloads decode to what can be read.
  EXPECT_FALSE(DecodeDrop(Pkt(AF_INET, "someone else", Ip4("1.1.1.1", "2.2.2.2", 6, 1, 2))));
  ev = DecodeDrop(Pkt(AF_INET, "weft-np in", "\x45"));
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->src, "");
}

DropEvent Ev(const std::string& kind, const std::string& src, const std::string& dst, uint16_t port,
             const std::string& table = "netpol") {
  DropEvent ev;
  ev.table = table;
  ev.kind = kind;
  ev.src = src;
  ev.dst = dst;
  ev.proto = "tcp";
  ev.dport = port;
  return ev;
}

TEST(DropLog, OneRecordPerFlowResolvedOnce) {
  DropLog log(8, 1000);
  int resolved = 0;
  auto resolve = [&](const DropEvent& ev) {
    ++resolved;
    DropContext c;
    c.src_pod = ev.src == "10.0.2.1" ? "y/a" : "";
    c.dst_pod = "x/a";
    c.ns = "x";
    c.policies = {"x/deny", "x/allow-b"};
    return c;
  };
  for (int i = 0; i < 5; ++i) log.Add(Ev("in", "10.0.2.1", "10.0.1.1", 80), 1000 + i, resolve);
  log.Add(Ev("in", "10.0.2.1", "10.0.1.1", 81), 1010, resolve);
  EXPECT_EQ(resolved, 2);
  auto recs = log.Since(0);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].packets, 5u);
  EXPECT_EQ(recs[0].last_ms, 1004);
  EXPECT_EQ(recs[0].direction, "ingress");
  EXPECT_EQ(DropLogfmt(recs[0]),
            "ts=1970-01-01T00:00:01.000Z seq=1 src=y/a src_ip=10.0.2.1 dst=x/a dst_ip=10.0.1.1 proto=tcp port=80 "
            "direction=ingress reason=policy policies=x/deny,x/allow-b packets=5 last=1970-01-01T00:00:01.004Z");
  EXPECT_EQ(log.Since(1).size(), 1u);
  // Quiet for longer than the idle time: a new record.
  log.Add(Ev("in", "10.0.2.1", "10.0.1.1", 80), 5000, resolve);
  EXPECT_EQ(log.Since(2).at(0).seq, 3u);
  auto m = log.PacketsByReasonAndNamespace();
  EXPECT_EQ((m[{"policy", "x"}]), 7u);
  // The policies changed (a new epoch): the same flow is a new record, resolved again.
  log.Add(Ev("in", "10.0.2.1", "10.0.1.1", 80), 5001, resolve, 1);
  EXPECT_EQ(log.Since(3).size(), 1u);
  EXPECT_EQ(resolved, 4);
}

TEST(DropLog, GuardAndReplyRecords) {
  DropLog log;
  log.Add(Ev("spoofed4", "10.0.1.2", "10.0.2.1", 80, "guard"), 1, [](const DropEvent&) {
    DropContext c;
    c.src_pod = "y/b";
    c.ns = "y";
    return c;
  });
  log.Add(Ev("rin", "10.0.1.1", "10.0.2.1", 0), 2, nullptr);
  auto recs = log.Since(0);
  ASSERT_EQ(recs.size(), 2u);
  std::string g = DropLogfmt(recs[0]);
  EXPECT_NE(g.find("src=y/b src_ip=10.0.1.2"), std::string::npos) << g;
  EXPECT_NE(g.find("reason=spoofed-source detail=\"source address not the pod's\""), std::string::npos) << g;
  std::string r = DropLogfmt(recs[1]);
  EXPECT_NE(r.find("direction=ingress reply=true reason=policy policies=-"), std::string::npos) << r;
  EXPECT_EQ(r.find("port="), std::string::npos) << r;
}

TEST(DropLog, RingIsBoundedAndForgetsEvictedFlows) {
  DropLog log(4, 1000000);
  for (int i = 0; i < 100; ++i) log.Add(Ev("eg", "10.0.1.1", "10.0.2.1", static_cast<uint16_t>(1000 + i)), i, nullptr);
  auto recs = log.Since(0);
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs.front().seq, 97u);
  // The first flow was evicted: its next packet starts a new record.
  log.Add(Ev("eg", "10.0.1.1", "10.0.2.1", 1000), 200, nullptr);
  EXPECT_EQ(log.Since(100).size(), 1u);
  EXPECT_EQ(log.records(), 101u);
  std::string m = RenderDropMetrics(log, 3, true);
  EXPECT_NE(m.find("weft_dropped_packets_recorded_total{reason=\"policy\",namespace=\"\"} 101"), std::string::npos) << m;
  EXPECT_NE(m.find("weft_drop_log_overruns_total 3"), std::string::npos);
  EXPECT_NE(m.find("weft_drop_log_up 1"), std::string::npos);
}

}  // namespace
}  // namespace weft::policy
