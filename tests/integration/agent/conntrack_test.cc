// sys::ConntrackSetMark against the kernel: real traffic from one test netns
// ("peer", several source addresses) to another ("node", where conntrack
// tracks it), then the marking done inside "node" as weftd's NetworkPolicy
// controller does it in the node's netns. The entries of the named
// addresses, of both families, of a non-default zone and of a zone of the
// original direction only, carry the recheck bit afterwards; the others keep
// their marks.
//
// sys::ConntrackDelete likewise, on entries `conntrack -I` creates in a test
// netns (UDP through a ClusterIP and NodePorts, DNATed to endpoints or not,
// TCP, IPv6, a zone): each kind of filter the Service proxy sends deletes
// what it names and nothing else, and a thousand matching entries go in
// several batches, counted.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <set>
#include <sstream>

#include "sys/conntrack.h"
#include "sys/netns.h"
#include "testutil/netns_fixture.h"

namespace weft {
namespace {

using testing::Cmd;
using testing::TestNetns;

constexpr uint32_t kBit = 0x20000000;  // netpol::kRecheckMark

class ConntrackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = std::make_unique<TestNetns>("ctnode");
    peer_ = std::make_unique<TestNetns>("ctpeer");
    ASSERT_EQ(Cmd({"ip", "-n", node_->name(), "link", "add", "ct0", "type", "veth", "peer", "name", "ct1", "netns",
                   peer_->name()}),
              0);
    auto ip = [](const TestNetns& ns, std::vector<std::string> args) {
      args.insert(args.begin(), {"ip", "-n", ns.name()});
      std::string err;
      ASSERT_EQ(Cmd(args, nullptr, &err), 0) << err;
    };
    ip(*node_, {"addr", "add", "10.250.0.1/24", "dev", "ct0"});
    ip(*node_, {"addr", "add", "fd00:250::1/64", "dev", "ct0", "nodad"});
    ip(*node_, {"link", "set", "ct0", "up"});
    for (const char* a : {"10.250.0.2/24", "10.250.0.3/24", "10.250.0.4/24", "10.250.0.5/24"})
      ip(*peer_, {"addr", "add", a, "dev", "ct1"});
    for (const char* a : {"fd00:250::2/64", "fd00:250::3/64"}) ip(*peer_, {"addr", "add", a, "dev", "ct1", "nodad"});
    ip(*peer_, {"link", "set", "ct1", "up"});
    // Conntrack runs in a netns once a rule uses it; 10.250.0.4's
    // connections live in zone 5, 10.250.0.5's in zone 6 of the original
    // direction only (the zone rides in the dumped tuple, not beside it).
    std::string err;
    ASSERT_EQ(Cmd({"ip", "netns", "exec", node_->name(), "nft", "-f", "-"}, nullptr, &err,
                  "table inet wtct {\n"
                  "  chain pre { type filter hook prerouting priority -300; ip saddr 10.250.0.4 ct zone set 5; "
                  "ip saddr 10.250.0.5 ct original zone set 6; }\n"
                  "  chain in { type filter hook input priority 0; ct state established accept; }\n"
                  "}\n"),
              0)
        << err;
    for (const char* src : {"10.250.0.2", "10.250.0.3", "10.250.0.4", "10.250.0.5", "fd00:250::2", "fd00:250::3"}) {
      const bool v6 = std::string(src).find(':') != std::string::npos;
      ASSERT_TRUE(peer_->Exec({"ping", "-c", "1", "-W", "2", "-I", src, v6 ? "fd00:250::1" : "10.250.0.1"}) == 0)
          << "ping from " << src;
    }
  }

  // The mark of the node's entry from `src` (-1: no such entry).
  long MarkFrom(const std::string& src) {
    const bool v6 = src.find(':') != std::string::npos;
    std::string out;
    node_->Exec({"conntrack", "-L", "-f", v6 ? "ipv6" : "ipv4", "-s", src}, &out);
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      auto m = line.find("mark=");
      if (line.find("src=" + src + " ") == std::string::npos || m == std::string::npos) continue;
      return std::stol(line.substr(m + 5));
    }
    return -1;
  }

  Result<size_t> Mark(const std::vector<std::string>& addrs) {
    auto ns = sys::Netns::Open(node_->path());
    if (!ns.ok()) return ns.status();
    size_t n = 0;
    Status st = sys::RunInNetns(*ns, [&]() -> Status {
      WEFT_ASSIGN_OR_RETURN(n, sys::ConntrackSetMark(addrs, kBit));
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return n;
  }

  std::unique_ptr<TestNetns> node_, peer_;
};

TEST_F(ConntrackTest, MarksTheEntriesOfTheNamedAddressesOnly) {
  for (const char* src : {"10.250.0.2", "10.250.0.3", "10.250.0.4", "10.250.0.5", "fd00:250::2", "fd00:250::3"})
    ASSERT_EQ(MarkFrom(src), 0) << src;
  // An old mark's other bits stay.
  ASSERT_EQ(node_->Exec({"conntrack", "-U", "-s", "10.250.0.2", "-m", "0x1"}), 0);
  ASSERT_EQ(MarkFrom("10.250.0.2"), 1);

  auto n = Mark({"10.250.0.2", "10.250.0.4", "10.250.0.5", "fd00:250::3"});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 4u);
  EXPECT_EQ(MarkFrom("10.250.0.2"), kBit | 1);
  EXPECT_EQ(MarkFrom("10.250.0.4"), kBit);  // in zone 5
  EXPECT_EQ(MarkFrom("10.250.0.5"), kBit);  // in zone 6, original direction
  EXPECT_EQ(MarkFrom("fd00:250::3"), kBit);
  EXPECT_EQ(MarkFrom("10.250.0.3"), 0);
  EXPECT_EQ(MarkFrom("fd00:250::2"), 0);

  // Marked entries are not updated again.
  n = Mark({"10.250.0.2"});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0u);

  // The destination matches too (the node's own address: every IPv4 entry).
  n = Mark({"10.250.0.1"});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(MarkFrom("10.250.0.3"), kBit);
  EXPECT_EQ(MarkFrom("fd00:250::2"), 0);

  // ::/0 stands for every IPv6 entry.
  n = Mark({"::/0"});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(MarkFrom("fd00:250::2"), kBit);
}

TEST_F(ConntrackTest, BadAddressChangesNothing) {
  auto n = Mark({"10.250.0.2", "10.250.0.999"});
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().reason(), Reason::kInvalidArgument);
  EXPECT_EQ(MarkFrom("10.250.0.2"), 0);
}

// ---- ConntrackDelete ----

// One UDP (or TCP) entry `conntrack -I` creates: client -> dst:dport, the
// reply from `reply_src`:`reply_sport` (a DNAT to an endpoint) or, without,
// from dst:dport. Entries are told apart by their client port.
struct Ct {
  const char* proto;
  const char* client;
  int sport;
  const char* dst;
  int dport;
  const char* reply_src = nullptr;
  int reply_sport = 0;
  int zone = -1;
};

std::string InsertLine(const Ct& c) {
  std::ostringstream l;
  l << "-I -p " << c.proto << " -s " << c.client << " -d " << c.dst << " --sport " << c.sport << " --dport "
    << c.dport << " -r " << (c.reply_src ? c.reply_src : c.dst) << " -q " << c.client << " --reply-port-src "
    << (c.reply_sport ? c.reply_sport : c.dport) << " --reply-port-dst " << c.sport << " -t 600";
  if (std::string(c.proto) == "tcp") l << " --state ESTABLISHED";
  if (c.zone >= 0) l << " -w " << c.zone;
  return l.str();
}

class ConntrackDeleteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = std::make_unique<TestNetns>("ctdel");
    Insert({
        // ClusterIP 10.96.0.10:53 (service port dns) and :54 (dns2).
        {"udp", "10.1.0.5", 40000, "10.96.0.10", 53, "10.244.1.5", 5353},
        {"udp", "10.1.0.5", 40001, "10.96.0.10", 53, "10.244.2.5", 5353},
        {"udp", "10.1.0.5", 40002, "10.96.0.10", 53},  // made while it had no endpoint
        {"udp", "10.1.0.5", 40003, "10.96.0.10", 54, "10.244.1.5", 5353},
        {"udp", "10.1.0.5", 40004, "10.96.0.10", 53, "10.244.1.5", 5354},  // the endpoint's other port
        {"udp", "10.1.0.5", 40005, "10.96.0.10", 53, "10.244.1.5", 5353, 5},  // zone 5
        // NodePorts 30053 and 30054 on two node addresses.
        {"udp", "10.1.0.5", 40010, "192.0.2.10", 30053, "10.244.1.5", 5353},
        {"udp", "10.1.0.5", 40011, "198.51.100.1", 30053, "10.244.2.5", 5353},
        {"udp", "10.1.0.5", 40012, "198.51.100.1", 30053},
        {"udp", "10.1.0.5", 40013, "192.0.2.10", 30054, "10.244.1.5", 5353},
        // TCP to the same ClusterIP and endpoint: never UDP's cleanup.
        {"tcp", "10.1.0.5", 40020, "10.96.0.10", 53, "10.244.1.5", 5353},
        // IPv6.
        {"udp", "fd00::5", 40030, "fd00:96::10", 53, "fd00:244::5", 5353},
        {"udp", "fd00::5", 40031, "fd00:96::10", 53, "fd00:244::6", 5353},
        {"udp", "fd00::5", 40032, "2001:db8::10", 30053, "fd00:244::5", 5353},
    });
  }

  void Insert(const std::vector<Ct>& entries) {
    std::string lines;
    for (const Ct& c : entries) lines += InsertLine(c) + "\n";
    std::string err;
    ASSERT_EQ(Cmd({"ip", "netns", "exec", ns_->name(), "conntrack", "-R", "/dev/stdin"}, nullptr, &err, lines), 0)
        << err;
  }

  // The client ports of the entries left of `family` and `proto`.
  std::set<int> Left(const char* family, const char* proto) {
    std::string out;
    ns_->Exec({"conntrack", "-L", "-f", family, "-p", proto}, &out);
    std::set<int> ports;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      auto p = line.find("sport=");
      if (p != std::string::npos) ports.insert(std::stoi(line.substr(p + 6)));
    }
    return ports;
  }

  Result<size_t> Delete(const std::vector<sys::CtDeleteFilter>& filters) {
    auto ns = sys::Netns::Open(ns_->path());
    if (!ns.ok()) return ns.status();
    size_t n = 0;
    Status st = sys::RunInNetns(*ns, [&]() -> Status {
      WEFT_ASSIGN_OR_RETURN(n, sys::ConntrackDelete(filters));
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return n;
  }

  std::unique_ptr<TestNetns> ns_;
};

using Ports = std::set<int>;

TEST_F(ConntrackDeleteTest, EachFilterKindDeletesWhatItNames) {
  ASSERT_EQ(Left("ipv4", "udp"), (Ports{40000, 40001, 40002, 40003, 40004, 40005, 40010, 40011, 40012, 40013}));
  ASSERT_EQ(Left("ipv6", "udp"), (Ports{40030, 40031, 40032}));

  // An endpoint left a ClusterIP's port (ClearEntriesForNAT): its entries
  // through that port, in any zone; with its port, only those to that port.
  auto n = Delete({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, "10.244.1.5", 5353}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(Left("ipv4", "udp"), (Ports{40001, 40002, 40003, 40004, 40010, 40011, 40012, 40013}));
  n = Delete({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, "10.244.1.5", 0}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1u);  // 40004
  EXPECT_EQ(Left("ipv4", "udp"), (Ports{40001, 40002, 40003, 40010, 40011, 40012, 40013}));

  // The same endpoint behind a NodePort (ClearEntriesForPortNAT).
  n = Delete({{AF_INET, IPPROTO_UDP, std::nullopt, 30053, "10.244.1.5", 5353}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(Left("ipv4", "udp"), (Ports{40001, 40002, 40003, 40011, 40012, 40013}));

  // A NodePort got its first endpoint (ClearEntriesForPort): every entry to
  // it, on any address.
  n = Delete({{AF_INET, IPPROTO_UDP, std::nullopt, 30053, std::nullopt, 0}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(Left("ipv4", "udp"), (Ports{40001, 40002, 40003, 40013}));

  // A ClusterIP's port got its first endpoint (ClearEntriesForIP).
  n = Delete({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, std::nullopt, 0}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(Left("ipv4", "udp"), (Ports{40003, 40013}));

  // Nothing left to delete: 0, no error.
  n = Delete({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, std::nullopt, 0}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 0u);

  // TCP and IPv6 were never touched.
  EXPECT_EQ(Left("ipv4", "tcp"), (Ports{40020}));
  EXPECT_EQ(Left("ipv6", "udp"), (Ports{40030, 40031, 40032}));

  // IPv6, and TCP when asked for.
  n = Delete({{AF_INET6, IPPROTO_UDP, "fd00:96::10", 53, "fd00:244::5", 5353}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(Left("ipv6", "udp"), (Ports{40031, 40032}));
  n = Delete({{AF_INET, IPPROTO_TCP, "10.96.0.10", 53, std::nullopt, 0}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(Left("ipv4", "tcp"), Ports{});
}

// One call, several filters over both families: one dump per family.
TEST_F(ConntrackDeleteTest, OneCallForBothFamilies) {
  auto n = Delete({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, "10.244.2.5", 0},
                   {AF_INET, IPPROTO_UDP, std::nullopt, 30054, std::nullopt, 0},
                   {AF_INET, IPPROTO_UDP, std::nullopt, 30053, "10.244.2.5", 0},
                   {AF_INET6, IPPROTO_UDP, std::nullopt, 30053, "fd00:244::5", 5353},
                   {AF_INET6, IPPROTO_UDP, "fd00:96::10", 53, "fd00:244::6", 0}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 5u);  // 40001, 40013, 40011; 40032, 40031
  EXPECT_EQ(Left("ipv4", "udp"), (Ports{40000, 40002, 40003, 40004, 40005, 40010, 40012}));
  EXPECT_EQ(Left("ipv6", "udp"), (Ports{40030}));
  EXPECT_EQ(Left("ipv4", "tcp"), (Ports{40020}));
}

// A thousand entries DNATed to one endpoint: ~100 KiB of deletes, several
// datagrams, every one counted and gone; the others stay.
TEST_F(ConntrackDeleteTest, ManyEntriesGoInBatches) {
  std::vector<Ct> many;
  std::vector<std::string> clients;
  for (int i = 0; i < 1000; ++i) clients.push_back("10.2." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1));
  for (const auto& c : clients) many.push_back({"udp", c.c_str(), 41000, "10.96.0.30", 53, "10.244.3.5", 5353});
  ASSERT_NO_FATAL_FAILURE(Insert(many));
  std::string count;
  ns_->Exec({"conntrack", "-C"}, &count);
  ASSERT_EQ(std::stoi(count), 1014);
  auto n = Delete({{AF_INET, IPPROTO_UDP, "10.96.0.30", 53, "10.244.3.5", 5353}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1000u);
  ns_->Exec({"conntrack", "-C"}, &count);
  EXPECT_EQ(std::stoi(count), 14);
  EXPECT_EQ(Left("ipv4", "udp").count(41000), 0u);
}

TEST_F(ConntrackDeleteTest, BadFilterDeletesNothing) {
  auto n = Delete({{AF_INET, IPPROTO_UDP, "10.96.0.10", 53, std::nullopt, 0},
                   {AF_INET, IPPROTO_UDP, "fd00:96::10", 53, std::nullopt, 0}});
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().reason(), Reason::kInvalidArgument);
  EXPECT_EQ(Left("ipv4", "udp").size(), 10u);
}

}  // namespace
}  // namespace weft
