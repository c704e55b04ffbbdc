// The reconciler driven by the Kubernetes control plane: two real nodes
// running weftd against a stand-in API server, through list, watch, patch,
// ADDED/MODIFIED/DELETED, BOOKMARK, ERROR 410 and a half-written event.

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <sstream>

#include "base/scope_guard.h"
#include "e2e/cluster.h"

namespace weft::testing {
namespace {

constexpr char kApi[] = "http://192.0.2.254:8080";
constexpr char kToken[] = "weft-test-token";

class KubeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = TempDir("kube");
    ul_ = std::make_unique<Underlay>();
    api_ = std::make_unique<Child>(
        ul_->name(), std::vector<std::string>{"/usr/bin/python3", FAKE_APISERVER, "--listen", "192.0.2.254:8080"},
        root_ + "/apiserver.log");
    ASSERT_TRUE(WaitFor([&] { return Curl("GET", "/_test/log").find('[') == 0; }, 10000, 100));
    std::ofstream kc(root_ + "/kubeconfig");
    kc << R"({"apiVersion":"v1","kind":"Config","current-context":"t",
      "contexts":[{"name":"t","context":{"cluster":"c","user":"u"}}],
      "clusters":[{"name":"c","cluster":{"server":")"
       << kApi << R"("}}],"users":[{"name":"u","user":{"token":")" << kToken << R"("}}]})";
  }

  void TearDown() override {
    if (HasFailure()) {
      for (auto& n : nodes_) std::cerr << n->LogTail(20000);
      std::cerr << "---- API log ----\n" << Curl("GET", "/_test/log") << "\n";
    }
    pods_.clear();
    for (auto& n : nodes_) n->StopWeftd(SIGKILL);
    nodes_.clear();
    api_.reset();
    ul_.reset();
    RemoveTree(root_);
  }

  std::string Curl(const std::string& method, const std::string& path, const std::string& body = "",
                   const std::string& content_type = "application/json") {
    std::string out;
    std::vector<std::string> argv = {"curl", "-s", "-m", "3", "-X", method, "-H", std::string("Authorization: Bearer ") + kToken,
                                     "-H", "Content-Type: " + content_type};
    if (!body.empty()) argv.insert(argv.end(), {"--data-binary", body});
    argv.push_back(std::string(kApi) + path);
    ul_->Exec(argv, &out);
    return out;
  }

  void PutNode(const std::string& name, const std::string& cidr, const std::string& ip,
               const nlohmann::json& annotations = nlohmann::json::object()) {
    nlohmann::json n = {{"kind", "Node"}, {"apiVersion", "v1"},
                        {"metadata", {{"name", name}, {"annotations", annotations}}},
                        {"spec", nlohmann::json::object()},
                        {"status", {{"addresses", {{{"type", "InternalIP"}, {"address", ip}}}}}}};
    if (!cidr.empty()) n["spec"] = {{"podCIDR", cidr}, {"podCIDRs", {cidr}}};
    Curl("POST", "/_test/nodes", n.dump());
  }

  WeftNode& AddNode(const std::string& name, int octet) {
    nodes_.push_back(std::make_unique<WeftNode>(*ul_, name, octet, root_));
    WeftNode& n = *nodes_.back();
    n.StartWeftd({"--control-plane", "kubernetes", "--kubeconfig", root_ + "/kubeconfig", "--cluster-cidr",
                  "10.245.0.0/16", "--backend", "vxlan", "--resync-period", "2", "--watch-timeout", "3"});
    return n;
  }

  bool Converged(WeftNode& n, size_t routes, int timeout_ms = 10000) {
    return WaitFor([&] { return n.AgentRoutes().size() == routes; }, timeout_ms);
  }

  int CountLog(const std::string& needle) {
    int c = 0;
    for (const auto& l : nlohmann::json::parse(Curl("GET", "/_test/log")))
      if (l.get<std::string>().find(needle) != std::string::npos) ++c;
    return c;
  }

  std::string root_;
  std::unique_ptr<Underlay> ul_;
  std::unique_ptr<Child> api_;
  std::vector<std::unique_ptr<WeftNode>> nodes_;
  std::vector<std::unique_ptr<Pod>> pods_;
};

TEST_F(KubeTest, ListWatchPatchBookmarkGoneAndHalfReadStream) {
  PutNode("n1", "10.245.1.0/24", "192.0.2.11");
  PutNode("n2", "10.245.2.0/24", "192.0.2.12");
  WeftNode& n1 = AddNode("n1", 11);
  WeftNode& n2 = AddNode("n2", 12);

  // Patch: each node publishes its VTEP MAC, and learns the other's from the
  // MODIFIED event.
  ASSERT_TRUE(Converged(n1, 1));
  ASSERT_TRUE(Converged(n2, 1));
  auto node1 = nlohmann::json::parse(Curl("GET", "/api/v1/nodes/n1"));
  auto link1 = n1.ns.IpJson({"link", "show", "dev", "weft.1"});
  ASSERT_EQ(link1.size(), 1u);
  EXPECT_EQ(node1["metadata"]["annotations"]["weft.io/vtep-mac"], link1[0]["address"]);
  EXPECT_EQ(node1["metadata"]["annotations"]["weft.io/host-ip"], "192.0.2.11");
  EXPECT_GE(CountLog("PATCH /api/v1/nodes/n1 application/merge-patch+json"), 1);
  EXPECT_GE(CountLog("allowWatchBookmarks=true"), 1);
  EXPECT_EQ(n1.AgentRoutes()[0], "10.245.2.0/24 via 10.245.2.0 dev weft.1");
  pods_.push_back(std::make_unique<Pod>(n1, "p1"));
  pods_.push_back(std::make_unique<Pod>(n2, "p2"));
  for (auto& p : pods_) ASSERT_TRUE(p->add_error.empty()) << p->add_error;
  EXPECT_TRUE(pods_[0]->ns.Ping(pods_[1]->ip, 2));
  EXPECT_TRUE(pods_[1]->ns.Ping(pods_[0]->ip, 2));

  // ADDED: a node with its annotations already set.
  PutNode("n3", "10.245.3.0/24", "192.0.2.13",
          {{"weft.io/vtep-mac", "0a:00:00:00:00:03"}, {"weft.io/host-ip", "192.0.2.13"}});
  ASSERT_TRUE(Converged(n1, 2));

  // BOOKMARK: the resourceVersion moves without an event for us (n9 comes
  // and goes silently); the next watch resumes from the bookmark's RV.
  PutNode("n9", "", "192.0.2.99");
  Curl("DELETE", "/_test/nodes/n9?silent=1");
  std::string rv = nlohmann::json::parse(Curl("GET", "/api/v1/nodes"))["metadata"]["resourceVersion"];
  Curl("POST", "/_test/bookmark");
  EXPECT_TRUE(WaitFor([&] { return CountLog("resourceVersion=" + rv + "&") >= 2; }, 8000))
      << "no watch resumed from the bookmark's resourceVersion " << rv;

  // 410: history is gone (n3's deletion was never sent as an event); the
  // open watch gets ERROR 410 and weftd re-lists.
  int lists = CountLog("GET /api/v1/nodes?limit=");
  Curl("DELETE", "/_test/nodes/n3?silent=1");
  Curl("POST", "/_test/expire");
  ASSERT_TRUE(Converged(n1, 1));
  EXPECT_GT(CountLog("GET /api/v1/nodes?limit="), lists);

  // A half-written event ("DELETED n2" cut mid-line) is never acted on.
  Curl("POST", "/_test/partial");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(n1.AgentRoutes().size(), 1u);
  EXPECT_TRUE(pods_[0]->ns.Ping(pods_[1]->ip, 1));

  // DELETED: n2's Node goes away and so do the routes to it.
  Curl("DELETE", "/_test/nodes/n2");
  EXPECT_TRUE(Converged(n1, 0));
  EXPECT_GE(n1.Metric("weft_controlplane_relists_total{backend=\"kubernetes\"}"), 2);
}

}  // namespace
}  // namespace weft::testing
