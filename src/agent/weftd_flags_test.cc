// weftd's command line: defaults, each control plane's options, and the
// values CLI11 accepts but weftd refuses.
#include "agent/weftd_flags.h"

#include <gtest/gtest.h>

#include <vector>

namespace weft::agent {
namespace {

ParsedFlags Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "weftd");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return ParseWeftdFlags(static_cast<int>(argv.size()), argv.data(), "weftd 1.2.3 (commit 0123456789ab)");
}

TEST(WeftdFlags, DefaultsAreKubernetesWithNetworkPolicy) {
  auto p = Parse({"--node-name", "n1"});
  ASSERT_FALSE(p.exit_code);
  ASSERT_TRUE(p.invalid.ok()) << p.invalid.ToString();
  const WeftdFlags& f = p.flags;
  EXPECT_EQ(f.control_plane, "kubernetes");
  EXPECT_EQ(f.agent.control_plane_name, "kubernetes");
  EXPECT_TRUE(f.agent.network_policy);
  EXPECT_EQ(f.agent.backend, overlay::Backend::kVxlan);
  EXPECT_EQ(f.agent.resync, std::chrono::seconds(30));
  EXPECT_EQ(f.agent.auth_failure_timeout, std::chrono::seconds(120));
  EXPECT_EQ(f.log_level, log::Level::kInfo);
  EXPECT_EQ(f.watch_timeout_seconds, 300);
  // The controller's options follow the agent's.
  EXPECT_EQ(f.netpol.node_name, "n1");
  EXPECT_EQ(f.netpol.namespaces_file, "/var/lib/weftd/netpol-namespaces");
  EXPECT_EQ(f.netpol.resync, std::chrono::seconds(30));
  EXPECT_TRUE(f.netpol.recheck_established);
  EXPECT_TRUE(f.netpol.cluster_network_policy);
  EXPECT_FALSE(f.service_proxy);  // off until issue 31's proof on a real cluster
}

TEST(WeftdFlags, ServiceProxyTakesTheNodeAndClusterCidrs) {
  auto p = Parse({"--node-name", "n1", "--service-proxy", "true", "--cluster-cidr", "10.244.0.0/16,fd00:244::/56",
                  "--resync-period", "5"});
  ASSERT_FALSE(p.exit_code);
  ASSERT_TRUE(p.invalid.ok()) << p.invalid.ToString();
  EXPECT_TRUE(p.flags.service_proxy);
  EXPECT_EQ(p.flags.proxy.node_name, "n1");
  EXPECT_EQ(p.flags.proxy.cluster_cidrs, p.flags.agent.cluster_cidrs);
  EXPECT_EQ(p.flags.proxy.cluster_cidrs.size(), 2u);
  EXPECT_EQ(p.flags.proxy.resync, std::chrono::seconds(5));
  EXPECT_NE(Parse({"--node-name=n", "--control-plane=etcd", "--etcd-endpoints=http://a:1", "--service-proxy=true"})
                .invalid.ToString()
                .find("--service-proxy needs --control-plane=kubernetes"),
            std::string::npos);
}

TEST(WeftdFlags, EtcdOptionsFromTheirFlags) {
  auto p = Parse({"--node-name=n2", "--control-plane=etcd", "--etcd-endpoints", " http://a:2379, ,http://b:2379",
                  "--etcd-prefix", "/x/y//", "--etcd-lease-ttl", "9", "--subnet-len", "26", "--cluster-cidr",
                  "10.1.0.0/16,fd00:1::/56", "--state-dir", "/s", "--resync-period", "0.5", "--backend", "host-gw"});
  ASSERT_FALSE(p.exit_code);
  ASSERT_TRUE(p.invalid.ok()) << p.invalid.ToString();
  const EtcdOptions& e = p.flags.etcd;
  EXPECT_EQ(e.endpoints, (std::vector<std::string>{"http://a:2379", "http://b:2379"}));
  EXPECT_EQ(e.prefix, "/x/y");
  EXPECT_EQ(e.lease_ttl, 9);
  EXPECT_EQ(e.subnet_len, 26);
  EXPECT_EQ(e.subnet_len6, 64);
  EXPECT_EQ(e.state_file, "/s/subnet");
  EXPECT_EQ(e.node_name, "n2");
  ASSERT_EQ(e.cluster_cidrs.size(), 2u);
  EXPECT_EQ(p.flags.agent.cluster_cidrs, e.cluster_cidrs);
  EXPECT_FALSE(p.flags.agent.network_policy);  // etcd holds no policies
  EXPECT_EQ(p.flags.agent.resync, std::chrono::milliseconds(500));
  EXPECT_EQ(p.flags.agent.backend, overlay::Backend::kHostGw);
}

TEST(WeftdFlags, RefusesWhatItCannotUse) {
  auto msg = [](ParsedFlags p) { return p.exit_code ? "exit" : p.invalid.ToString(); };
  EXPECT_NE(msg(Parse({})).find("--node-name (or NODE_NAME) is required"), std::string::npos);
  EXPECT_NE(msg(Parse({"--node-name=n", "--control-plane=etcd"})).find("--etcd-endpoints is required"),
            std::string::npos);
  EXPECT_NE(msg(Parse({"--node-name=n", "--control-plane=etcd", "--etcd-endpoints=http://a:1",
                       "--network-policy=true"}))
                .find("--network-policy needs --control-plane=kubernetes"),
            std::string::npos);
  EXPECT_NE(msg(Parse({"--node-name=n", "--cluster-cidr=10.0.0.0/33"})).find("--cluster-cidr"), std::string::npos);
  EXPECT_NE(msg(Parse({"--node-name=n", "--node-ip=nope"})).find("--node-ip"), std::string::npos);
  auto level = Parse({"--node-name=n", "--log-level=loud"});
  EXPECT_NE(msg(level).find("--log-level must be"), std::string::npos);
  // --install-plugin copies a file: it needs no node name.
  EXPECT_TRUE(Parse({"--install-plugin=/weft"}).invalid.ok());
}

TEST(WeftdFlags, HelpVersionAndUsageErrorsExit) {
  testing::internal::CaptureStdout();
  auto v = Parse({"--version"});
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "weftd 1.2.3 (commit 0123456789ab)\n");
  EXPECT_EQ(v.exit_code, 0);
  testing::internal::CaptureStdout();
  EXPECT_EQ(Parse({"--help"}).exit_code, 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("--etcd-endpoints"), std::string::npos);
  testing::internal::CaptureStderr();
  auto bad = Parse({"--backend=nope"});
  testing::internal::GetCapturedStderr();
  ASSERT_TRUE(bad.exit_code);
  EXPECT_NE(*bad.exit_code, 0);
}

}  // namespace
}  // namespace weft::agent
