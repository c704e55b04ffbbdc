// weftd's status server from the network (issue 33 §1), and whose Node
// weftd writes (§2), in the virtual cluster: two nodes whose weftd listens on
// 0.0.0.0:9641 and authenticates with a pod-bound token of its own, the
// stand-in API server answering TokenReview and SubjectAccessReview from its
// RBAC objects. Callers: a pod on the other node, a pod on the same node, the
// other node itself; each without a token, with the token of a
// ServiceAccount nobody granted anything, with a forged token, and with the
// token of the operator's ServiceAccount bound to deploy/weftd.yaml's
// weftd-status-reader role.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e/netpol_harness.h"

namespace weft::testing::netpol {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kProtected = {"/netpol", "/netpol/ruleset", "/netpol/explain?src=x/a&dst=x/b",
                                             "/drops"};
const std::vector<std::string> kPublic = {"/healthz", "/readyz", "/metrics"};

class StatusAuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.pods = {"x/a", "x/b"};  // x/a on n1, x/b on n2
    o.weftd_flags = {"--metrics-addr", "0.0.0.0:9641"};
    o.pod_bound_tokens = true;
    cluster_ = std::make_unique<NetpolCluster>(o);
    if (!cluster_->error().empty()) return;
    FakeApiServer& api = cluster_->api();
    // deploy/weftd.yaml's role for an operator's tooling, bound as its
    // comment shows; a second role grants nodes/metrics (--metrics-auth).
    api.Apply({{"kind", "ClusterRole"},
               {"metadata", {{"name", "weftd-status-reader"}}},
               {"rules", {{{"apiGroups", {""}}, {"resources", {"nodes/weft-status"}}, {"verbs", {"get"}}}}}});
    api.Apply({{"kind", "ClusterRole"},
               {"metadata", {{"name", "metrics-reader"}}},
               {"rules", {{{"apiGroups", {""}}, {"resources", {"nodes/metrics"}}, {"verbs", {"get"}}}}}});
    api.Apply(NetpolCluster::NamespaceObject("monitoring"));
    for (const char* sa : {"weft-operator", "prometheus"})
      api.Apply({{"kind", "ServiceAccount"}, {"metadata", {{"name", sa}, {"namespace", "monitoring"}}}});
    api.Apply({{"kind", "ServiceAccount"}, {"metadata", {{"name", "other"}, {"namespace", "x"}}}});
    auto bind = [&](const std::string& name, const std::string& role, const std::string& sa) {
      api.Apply({{"kind", "ClusterRoleBinding"},
                 {"metadata", {{"name", name}}},
                 {"roleRef", {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "ClusterRole"}, {"name", role}}},
                 {"subjects", {{{"kind", "ServiceAccount"}, {"name", sa}, {"namespace", "monitoring"}}}}});
    };
    bind("weft-operator", "weftd-status-reader", "weft-operator");
    bind("prometheus", "metrics-reader", "prometheus");
    operator_ = api.CreateToken("monitoring", "weft-operator");
    prometheus_ = api.CreateToken("monitoring", "prometheus");
    other_ = api.CreateToken("x", "other");
    std::ifstream(cluster_->root() + "/token-n2") >> weftd_n2_;  // FakeApiServer::KubeconfigWithToken's
    token_file_ = cluster_->root() + "/operator.token";
    std::ofstream(token_file_) << operator_ << "\n";
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    ASSERT_TRUE(cluster_->error().empty()) << "cluster set-up failed: " << cluster_->error() << "\n"
                                           << cluster_->Diagnostics();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->Diagnostics();
  }

  // GET http://<n1>:9641<path> from `from` with `token` ("" = none): the HTTP code (0: no answer).
  static int Code(const TestNetns& from, const std::string& path, const std::string& token = "",
                  std::string* body = nullptr) {
    std::vector<std::string> argv = {"curl", "-s", "-m", "3", "-w", "\n%{http_code}"};
    if (!token.empty()) argv.insert(argv.end(), {"-H", "Authorization: Bearer " + token});
    argv.push_back("http://192.0.2.11:9641" + path);
    std::string out;
    from.Exec(argv, &out);
    size_t nl = out.rfind('\n');
    if (body) *body = nl == std::string::npos ? out : out.substr(0, nl);
    return nl == std::string::npos ? 0 : std::atoi(out.c_str() + nl + 1);
  }

  static std::unique_ptr<NetpolCluster> cluster_;
  static std::string operator_, prometheus_, other_, weftd_n2_, token_file_;
};

std::unique_ptr<NetpolCluster> StatusAuthTest::cluster_;
std::string StatusAuthTest::operator_, StatusAuthTest::prometheus_, StatusAuthTest::other_,
    StatusAuthTest::weftd_n2_, StatusAuthTest::token_file_;

TEST_F(StatusAuthTest, ProtectedPathsAnswerOnlyTheLoopbackAndAnAuthorizedToken) {
  const TestNetns& remote_pod = cluster_->pod("x/b").pod->ns;  // on n2
  const TestNetns& local_pod = cluster_->pod("x/a").pod->ns;   // on n1 itself
  const TestNetns& other_node = cluster_->node(1).ns;
  for (const TestNetns* from : {&remote_pod, &local_pod, &other_node}) {
    SCOPED_TRACE("from " + from->name());
    for (const auto& path : kProtected) {
      SCOPED_TRACE(path);
      std::string body;
      EXPECT_EQ(Code(*from, path, "", &body), 401) << body;
      EXPECT_EQ(Code(*from, path, "sa.forged-token", &body), 401) << body;
      EXPECT_EQ(Code(*from, path, other_, &body), 403) << body;
      EXPECT_NE(body.find("user=system:serviceaccount:x:other"), std::string::npos) << body;
      // Allowed /metrics (nodes/metrics), not the status.
      EXPECT_EQ(Code(*from, path, prometheus_, &body), 403) << body;
      // The other node's weftd: authenticated, but weftd's role grants no
      // status access.
      EXPECT_EQ(Code(*from, path, weftd_n2_, &body), 403) << body;
      EXPECT_EQ(Code(*from, path, operator_, &body), 200) << body;
    }
    for (const auto& path : kPublic) EXPECT_EQ(Code(*from, path), 200) << path;
  }
  // The refusals give nothing away; the operator's answer is the real one.
  std::string body;
  ASSERT_EQ(Code(remote_pod, "/netpol/ruleset", "", &body), 401);
  EXPECT_EQ(body.find("table"), std::string::npos) << body;
  ASSERT_EQ(Code(remote_pod, "/netpol/ruleset", operator_, &body), 200);
  EXPECT_NE(body.find("table inet weft-netpol"), std::string::npos) << body.substr(0, 300);
  // On the node's loopback (weftctl's default address) nothing is asked.
  for (const auto& path : kProtected) {
    int code = 0;
    cluster_->node(0).Http(path, &code);
    EXPECT_EQ(code, 200) << path;
  }
}

TEST_F(StatusAuthTest, WeftctlOnTheNodeAndThroughTheAuthenticatedPath) {
  std::string out, err;
  // On the node: the loopback, no token.
  EXPECT_EQ(cluster_->WeftctlExplain(0, {"x/a", "x/b", "80"}, &out, &err), 0) << out << err;
  // From the other node: refused without a token, answered with one.
  EXPECT_NE(cluster_->WeftctlExplain(1, {"x/a", "x/b", "80", "--weftd-addr", "192.0.2.11:9641"}, &out, &err), 0);
  EXPECT_NE(err.find("refused GET /netpol/explain"), std::string::npos) << err;
  EXPECT_NE(err.find("HTTP 401"), std::string::npos) << err;
  EXPECT_EQ(cluster_->WeftctlExplain(1, {"x/a", "x/b", "80", "--weftd-addr", "192.0.2.11:9641", "--token-file",
                                         token_file_},
                                     &out, &err),
            0)
      << out << err;
  EXPECT_NE(out.find("allowed"), std::string::npos) << out;
  auto drops = [&](std::vector<std::string> extra, std::string* o, std::string* e) {
    std::vector<std::string> argv = {"ip", "netns", "exec", cluster_->node(1).ns.name(), BinaryPath("weftctl"),
                                     "policy", "drops", "--weftd-addr", "192.0.2.11:9641"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return Cmd(argv, o, e);
  };
  EXPECT_NE(drops({}, &out, &err), 0);
  EXPECT_NE(err.find("HTTP 401"), std::string::npos) << err;
  EXPECT_EQ(drops({"--token-file", token_file_}, &out, &err), 0) << out << err;
  std::string bad_file = cluster_->root() + "/other.token";
  std::ofstream(bad_file) << other_;
  EXPECT_NE(drops({"--token-file", bad_file}, &out, &err), 0);
  EXPECT_NE(err.find("HTTP 403"), std::string::npos) << err;
  EXPECT_NE(drops({"--token-file", cluster_->root() + "/missing.token"}, &out, &err), 0);
  EXPECT_NE(err.find("--token-file"), std::string::npos) << err;
}

TEST_F(StatusAuthTest, MetricsAuthPutsMetricsBehindNodesMetrics) {
  const TestNetns& pod = cluster_->pod("x/b").pod->ns;
  WeftNode& n1 = cluster_->node(0);
  n1.StopWeftd();
  cluster_->StartWeftd(0, {"--metrics-auth", "true"});
  ASSERT_TRUE(WaitFor([&] { return Code(pod, "/readyz") == 200; }, 20000, 100)) << n1.LogTail(4000);
  std::string body;
  EXPECT_EQ(Code(pod, "/metrics", "", &body), 401) << body;
  EXPECT_EQ(Code(pod, "/metrics", operator_, &body), 403) << body;  // weft-status is not metrics
  EXPECT_EQ(Code(pod, "/metrics", prometheus_, &body), 200) << body.substr(0, 200);
  EXPECT_NE(body.find("weft_"), std::string::npos);
  EXPECT_EQ(Code(pod, "/netpol", prometheus_), 403);  // and metrics is not weft-status
  EXPECT_EQ(Code(pod, "/healthz"), 200);
  int code = 0;
  n1.Http("/metrics", &code);
  EXPECT_EQ(code, 200);  // the loopback
  n1.StopWeftd();
  cluster_->StartWeftd(0);
  ASSERT_TRUE(WaitFor([&] { return Code(pod, "/readyz") == 200; }, 20000, 100)) << n1.LogTail(4000);
  EXPECT_EQ(Code(pod, "/metrics"), 200);
}

// Every Node write of the stand-in names its writer and the node in the
// writer's token: weftd wrote its own Node only, and each did write it.
TEST_F(StatusAuthTest, WeftdWritesItsOwnNodeOnly) {
  json writes = cluster_->api().Writes();
  std::map<std::string, int> own;
  const std::string weftd = "system:serviceaccount:kube-system:weftd";
  for (const auto& w : writes) {
    const std::string path = w.value("path", ""), user = w.value("user", "");
    if (user != weftd) continue;
    EXPECT_NE(w.value("node", ""), "") << w.dump();
    if (path.rfind("/api/v1/nodes", 0) != 0) continue;
    std::string target = path.substr(path.rfind('/') + 1);
    EXPECT_EQ(target, w.value("node", "")) << "weftd of " << w.value("node", "") << " wrote " << w.dump();
    EXPECT_EQ(w.value("method", ""), "PATCH") << w.dump();
    own[target]++;
  }
  EXPECT_GE(own["n1"], 1) << writes.dump();
  EXPECT_GE(own["n2"], 1) << writes.dump();
  EXPECT_EQ(own.size(), 2u) << writes.dump();
}

}  // namespace
}  // namespace weft::testing::netpol
