// sys::ConntrackSetMark against the kernel: real traffic from one test netns
// ("peer", several source addresses) to another ("node", where conntrack
// tracks it), then the marking done inside "node" as weftd's NetworkPolicy
// controller does it in the node's netns. The entries of the named
// addresses, of both families, of a non-default zone and of a zone of the
// original direction only, carry the recheck bit afterwards; the others keep
// their marks.

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace weft
