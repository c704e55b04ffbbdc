// sys::NflogSocket against the kernel, in a test netns: a socket bound to an
// NFLOG group there, an nftables rule logging UDP to that group, packets sent
// on lo. What weftd's drop recorder reads (agent/drops.h), decoded by
// libnetfilter_log: family, prefix, ethertype, interfaces and the copy range.
// The time to log and read a burst is printed (no timed assertion: the
// machine is shared).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>

#include "base/unique_fd.h"
#include "sys/netns.h"
#include "sys/nflog.h"
#include "testutil/netns_fixture.h"

namespace weft {
namespace {

using testing::Cmd;
using testing::TestNetns;

constexpr uint16_t kGroup = 7;

class NflogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = std::make_unique<TestNetns>("nflog");
    ASSERT_EQ(Cmd({"ip", "-n", ns_->name(), "link", "set", "lo", "up"}), 0);
    std::string err;
    ASSERT_EQ(Cmd({"ip", "netns", "exec", ns_->name(), "nft", "-f", "-"}, nullptr, &err,
                  "table inet wtlog {\n"
                  "  chain out { type filter hook output priority 0; udp dport 9999 log prefix \"wt-test\" group 7; }\n"
                  "}\n"),
              0)
        << err;
    auto ns = sys::Netns::Open(ns_->path());
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    netns_.emplace(std::move(*ns));
  }

  Result<sys::NflogSocket> Open(uint32_t copy_range) {
    std::optional<sys::NflogSocket> sock;
    Status st = sys::RunInNetns(*netns_, [&]() -> Status {
      WEFT_ASSIGN_OR_RETURN(auto s, sys::NflogSocket::Open(kGroup, copy_range));
      sock.emplace(std::move(s));
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return std::move(*sock);
  }

  // `n` UDP datagrams of `size` bytes to 127.0.0.1:9999, from inside the netns.
  void Send(int n, size_t size) {
    Status st = sys::RunInNetns(*netns_, [&]() -> Status {
      UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(9999);
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      std::string data(size, 'w');
      for (int i = 0; i < n; ++i)
        if (::sendto(fd.get(), data.data(), data.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0)
          return Status::FromErrno(Reason::kFailed, Domain::kKernel, "sendto", errno);
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  std::unique_ptr<TestNetns> ns_;
  std::optional<sys::Netns> netns_;
};

TEST_F(NflogTest, ReadsLoggedPacketsUpToTheCopyRange) {
  auto sock = Open(64);
  ASSERT_TRUE(sock.ok()) << sock.status().ToString();
  EXPECT_EQ(sock->group(), kGroup);
  Send(3, 200);
  std::vector<sys::NflogPacket> got;
  for (int i = 0; i < 20 && got.size() < 3; ++i) {
    auto pkts = sock->Read(200);
    ASSERT_TRUE(pkts.ok()) << pkts.status().ToString();
    for (auto& p : *pkts) got.push_back(std::move(p));
  }
  ASSERT_EQ(got.size(), 3u);
  for (const auto& p : got) {
    EXPECT_EQ(p.family, AF_INET);
    EXPECT_EQ(p.prefix, "wt-test");
    EXPECT_EQ(p.hw_protocol, 0x0800);
    EXPECT_EQ(p.indev, 0u);  // sent by this host: no input interface
    EXPECT_NE(p.outdev, 0u);  // lo
    ASSERT_EQ(p.payload.size(), 64u);  // 228 bytes on the wire, cut at the copy range
    EXPECT_EQ(static_cast<uint8_t>(p.payload[0]), 0x45);
  }
  // Nothing more: a read times out empty.
  auto none = sock->Read(50);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(NflogTest, TheGroupHasOneReader) {
  auto first = Open(64);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = Open(64);
  ASSERT_FALSE(second.ok());
  // The kernel answers another socket's bind with EPERM, not EBUSY.
  EXPECT_EQ(second.status().sys_errno(), EPERM) << second.status().ToString();
  std::cout << "second bind of group " << kGroup << ": " << second.status().ToString() << "\n";
}

TEST_F(NflogTest, BurstIsReadOrCountedAsOverruns) {
  auto sock = Open(128);
  ASSERT_TRUE(sock.ok()) << sock.status().ToString();
  constexpr int kPackets = 20000;
  auto t0 = std::chrono::steady_clock::now();
  Send(kPackets, 100);
  size_t got = 0;
  uint64_t overruns = 0;
  for (int idle = 0; idle < 3 && got < kPackets;) {
    auto pkts = sock->Read(100, &overruns);
    ASSERT_TRUE(pkts.ok()) << pkts.status().ToString();
    got += pkts->size();
    idle = pkts->empty() ? idle + 1 : 0;
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "burst of " << kPackets << ": " << got << " read, " << overruns << " overrun(s), " << ms
            << " ms (send and read, shared machine)\n";
  EXPECT_GT(got, 0u);
  EXPECT_LE(got, static_cast<size_t>(kPackets));
  EXPECT_TRUE(got == kPackets || overruns > 0) << "packets lost without an overrun counted";
}

}  // namespace
}  // namespace weft
