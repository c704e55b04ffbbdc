// The healthCheckNodePort answer (kube-proxy's service_health.go), without
// root: status codes, the body byte for byte, the headers. The servers
// themselves are tested in a network namespace
// (tests/integration/agent/health_server_test.cc).
#include "services/health_server.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace weft::services {
namespace {

TEST(HealthAnswer, LocalEndpointsAre200AndNoneIs503) {
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 1}).code, 200);
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 3}).code, 200);
  // No ready local endpoint (none at all, or only terminating ones, which
  // the caller does not count): the load balancer must leave this node.
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 0}).code, 503);
  // An unhealthy proxy fails every check, as kube-proxy's does.
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 3}, false).code, 503);
}

TEST(HealthAnswer, BodyIsKubeProxysByteForByte) {
  // pkg/proxy/healthcheck: a tab-indented template, dedented, trimmed of
  // its newlines.
  EXPECT_EQ(ServiceHealthAnswer({"default", "web", 2}).body,
            "{\n"
            "\t\"service\": {\n"
            "\t\t\"namespace\": \"default\",\n"
            "\t\t\"name\": \"web\"\n"
            "\t},\n"
            "\t\"localEndpoints\": 2,\n"
            "\t\"serviceProxyHealthy\": true\n"
            "}");
  auto none = nlohmann::json::parse(ServiceHealthAnswer({"kube-system", "dns", 0}, false).body);
  EXPECT_EQ(none, nlohmann::json::parse(R"({"service": {"namespace": "kube-system", "name": "dns"},
                                            "localEndpoints": 0, "serviceProxyHealthy": false})"));
  // Whatever the names hold, the body stays JSON.
  auto odd = nlohmann::json::parse(ServiceHealthAnswer({"a\"b", "c\\d\n", 1}).body);
  EXPECT_EQ(odd["service"]["namespace"], "a\"b");
  EXPECT_EQ(odd["service"]["name"], "c\\d\n");
}

TEST(HealthAnswer, HeadersAreKubeProxys) {
  using Headers = std::vector<std::pair<std::string, std::string>>;
  for (int n : {0, 1})
    EXPECT_EQ(ServiceHealthAnswer({"default", "web", n}).headers,
              (Headers{{"Content-Type", "application/json"}, {"X-Content-Type-Options", "nosniff"}}));
}

TEST(HealthServer, NothingWantedOpensNothing) {
  HealthServer s;
  auto r = s.Sync({});
  EXPECT_TRUE(r.opened.empty());
  EXPECT_TRUE(r.closed.empty());
  EXPECT_TRUE(r.failed.empty());
  EXPECT_TRUE(s.States().empty());
  EXPECT_FALSE(s.StateOf("default", "web"));
}

}  // namespace
}  // namespace weft::services
