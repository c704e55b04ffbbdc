#include "kube/kube_endpoint.h"

#include <gtest/gtest.h>

#include "base/strings.h"

namespace weft::kube {
namespace {

TEST(Kubeconfig, YamlWithInlineDataAndRelativePaths) {
  std::string dir = ::testing::TempDir() + "/kubecfg";
  std::string yaml = R"(apiVersion: v1
kind: Config
current-context: weft
clusters:
- name: other
  cluster: {server: "https://wrong:1"}
- name: c1
  cluster:
    server: https://10.96.0.1:443/
    certificate-authority-data: )" +
                     Base64Encode("CA PEM") + R"(
contexts:
- name: weft
  context:
    cluster: c1
    user: u1
users:
- name: u1
  user:
    token: abc.def
    client-certificate: certs/client.crt
)";
  auto e = ParseKubeconfig(yaml, dir, "/etc/kube");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->server, "https://10.96.0.1:443");
  EXPECT_EQ(e->files.token, "abc.def");
  EXPECT_EQ(e->files.tls.cert_file, "/etc/kube/certs/client.crt");
  ASSERT_FALSE(e->files.tls.ca_file.empty());
  EXPECT_FALSE(ParseKubeconfig("current-context: nope\ncontexts: []\n", dir, "/").ok());
  EXPECT_FALSE(ParseKubeconfig("a: [b", dir, "/").ok());
  // JSON is YAML too.
  auto j = ParseKubeconfig(R"({"current-context":"x","contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],
    "clusters":[{"name":"c","cluster":{"server":"http://192.0.2.250:8080","insecure-skip-tls-verify":true}}],
    "users":[{"name":"u","user":{}}]})",
                           dir, "/");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->server, "http://192.0.2.250:8080");
  EXPECT_TRUE(j->files.tls.insecure);
}

TEST(InCluster, NeedsServiceEnv) {
  EXPECT_FALSE(InClusterEndpoint({"PATH=/bin"}, "/nonexistent").ok());
}

}  // namespace
}  // namespace weft::kube
