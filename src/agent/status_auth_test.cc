#include "agent/status_auth.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

namespace weft::agent {
namespace {

// Answers as an API server with one known token ("good", user op, allowed
// on weft-status only) and one of a user nobody granted anything ("other").
class ScriptedReviewer : public TokenReviewer {
 public:
  int reviews = 0, authorizations = 0;
  bool fail = false;
  AuthzAttributes last;
  Result<TokenReviewResult> Review(const std::string& token) override {
    ++reviews;
    if (fail) return Status::Error(Reason::kUnavailable, Domain::kControlPlane, "connection refused");
    TokenReviewResult r;
    if (token == "good" || token == "other") {
      r.authenticated = true;
      r.user.username = token == "good" ? "system:serviceaccount:monitoring:op" : "system:serviceaccount:default:x";
    } else {
      r.error = "invalid bearer token";
    }
    return r;
  }
  Result<AccessReviewResult> Authorize(const UserInfo& user, const AuthzAttributes& attrs) override {
    ++authorizations;
    last = attrs;
    AccessReviewResult r;
    r.allowed = user.username == "system:serviceaccount:monitoring:op" && attrs.subresource == "weft-status";
    return r;
  }
};

StatusServer::Request Req(std::string path, std::string auth = "", std::string remote = "192.0.2.7",
                          std::string local = "192.0.2.1") {
  StatusServer::Request r;
  r.path = std::move(path);
  r.authorization = std::move(auth);
  r.remote_addr = std::move(remote);
  r.local_addr = std::move(local);
  return r;
}

struct GateTest : ::testing::Test {
  std::chrono::steady_clock::time_point now{};
  ScriptedReviewer* reviewer = nullptr;
  std::unique_ptr<StatusGate> Make(bool metrics_auth = false) {
    auto r = std::make_unique<ScriptedReviewer>();
    reviewer = r.get();
    StatusAuthOptions o;
    o.node_name = "n1";
    o.metrics_auth = metrics_auth;
    o.cache_max = 4;
    return std::make_unique<StatusGate>(o, std::move(r), [this] { return now; });
  }
};

TEST(StatusAuth, PathsAndLoopback) {
  EXPECT_EQ(ClassifyPath("/healthz", true), PathAccess::kPublic);
  EXPECT_EQ(ClassifyPath("/readyz", true), PathAccess::kPublic);
  EXPECT_EQ(ClassifyPath("/metrics", false), PathAccess::kPublic);
  EXPECT_EQ(ClassifyPath("/metrics", true), PathAccess::kProtected);
  for (const char* p : {"/netpol", "/netpol/ruleset", "/netpol/explain", "/drops", "/anything-new", "/"})
    EXPECT_EQ(ClassifyPath(p, false), PathAccess::kProtected) << p;
  EXPECT_TRUE(IsLoopbackConnection("127.0.0.1", "127.0.0.1"));
  EXPECT_TRUE(IsLoopbackConnection("::1", "::1"));
  EXPECT_TRUE(IsLoopbackConnection("::ffff:127.0.0.5", "127.0.0.1"));
  // A forged loopback source reaches the node's address, not the loopback.
  EXPECT_FALSE(IsLoopbackConnection("127.0.0.1", "192.0.2.1"));
  EXPECT_FALSE(IsLoopbackConnection("192.0.2.7", "127.0.0.1"));
  EXPECT_FALSE(IsLoopbackConnection("", ""));
  EXPECT_FALSE(IsLoopbackConnection("::ffff:10.0.0.1", "::1"));
}

TEST_F(GateTest, PublicAndLoopbackNeedNoToken) {
  auto g = Make();
  EXPECT_FALSE(g->Check(Req("/healthz")));
  EXPECT_FALSE(g->Check(Req("/metrics")));
  EXPECT_FALSE(g->Check(Req("/netpol/ruleset", "", "127.0.0.1", "127.0.0.1")));
  EXPECT_EQ(reviewer->reviews, 0);
}

TEST_F(GateTest, ProtectedPathsRefuseWithoutAValidAuthorizedToken) {
  auto g = Make();
  auto none = g->Check(Req("/netpol/ruleset"));
  ASSERT_TRUE(none);
  EXPECT_EQ(none->code, 401);
  EXPECT_EQ(none->www_authenticate, "Bearer realm=\"weftd\"");
  auto basic = g->Check(Req("/drops", "Basic Zm9vOmJhcg=="));
  ASSERT_TRUE(basic);
  EXPECT_EQ(basic->code, 401);
  auto invalid = g->Check(Req("/drops", "Bearer forged"));
  ASSERT_TRUE(invalid);
  EXPECT_EQ(invalid->code, 401);
  auto other = g->Check(Req("/netpol/explain", "Bearer other"));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->code, 403);
  EXPECT_NE(other->body.find("user=system:serviceaccount:default:x"), std::string::npos) << other->body;
  EXPECT_FALSE(g->Check(Req("/netpol", "Bearer good")));
  EXPECT_EQ(reviewer->last.resource, "nodes");
  EXPECT_EQ(reviewer->last.subresource, "weft-status");
  EXPECT_EQ(reviewer->last.name, "n1");
}

TEST_F(GateTest, MetricsAuthAsksForNodesMetrics) {
  auto g = Make(/*metrics_auth=*/true);
  auto r = g->Check(Req("/metrics", "Bearer good"));
  ASSERT_TRUE(r);  // the scripted RBAC grants weft-status only
  EXPECT_EQ(r->code, 403);
  EXPECT_EQ(reviewer->last.subresource, "metrics");
  EXPECT_EQ(g->Check(Req("/metrics"))->code, 401);
  EXPECT_FALSE(g->Check(Req("/healthz")));
}

TEST_F(GateTest, AnswersAreCachedForTheirTtlAndFailuresNot) {
  auto g = Make();
  EXPECT_FALSE(g->Check(Req("/netpol", "Bearer good")));
  EXPECT_FALSE(g->Check(Req("/drops", "Bearer good")));
  EXPECT_EQ(reviewer->reviews, 1);
  now += std::chrono::seconds(121);
  EXPECT_FALSE(g->Check(Req("/netpol", "Bearer good")));
  EXPECT_EQ(reviewer->reviews, 2);
  EXPECT_EQ(g->Check(Req("/netpol", "Bearer forged"))->code, 401);
  EXPECT_EQ(g->Check(Req("/netpol", "Bearer forged"))->code, 401);
  EXPECT_EQ(reviewer->reviews, 3);
  now += std::chrono::seconds(11);
  EXPECT_EQ(g->Check(Req("/netpol", "Bearer forged"))->code, 401);
  EXPECT_EQ(reviewer->reviews, 4);
  // The API server unreachable: 503, asked again next time.
  reviewer->fail = true;
  EXPECT_EQ(g->Check(Req("/netpol", "Bearer new"))->code, 503);
  EXPECT_EQ(g->Check(Req("/netpol", "Bearer new"))->code, 503);
  EXPECT_EQ(reviewer->reviews, 6);
  // More tokens than the cache holds (it starts over): the answers stay right.
  reviewer->fail = false;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(g->Check(Req("/netpol", "Bearer t" + std::to_string(i)))->code, 401);
}

// An API server that does not answer holds at most max_reviewers workers;
// the next caller with a new token is told "busy" at once, and public paths,
// the loopback and cached answers never wait.
class BlockingReviewer : public ScriptedReviewer {
 public:
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int waiting = 0;
  Result<TokenReviewResult> Review(const std::string& token) override {
    std::unique_lock<std::mutex> l(mu);
    ++waiting;
    cv.notify_all();
    cv.wait(l, [&] { return release; });
    return ScriptedReviewer::Review(token);
  }
};

TEST(StatusGateBusy, ASlowApiServerHoldsAtMostMaxReviewersWorkers) {
  auto owned = std::make_unique<BlockingReviewer>();
  BlockingReviewer* r = owned.get();
  StatusAuthOptions o;
  EXPECT_EQ(o.max_reviewers, 2);  // of the server's 8 workers
  o.node_name = "n1";
  o.max_reviewers = 1;  // one waiting worker is enough to show it (and deterministic)
  StatusGate g(o, std::move(owned));
  int code = 0;
  std::thread worker([&g, &code] {
    auto a = g.Check(Req("/netpol", "Bearer good"));
    code = a ? a->code : 200;
  });
  {
    std::unique_lock<std::mutex> l(r->mu);
    ASSERT_TRUE(r->cv.wait_for(l, std::chrono::seconds(10), [&] { return r->waiting == 1; }));
  }
  auto next = g.Check(Req("/netpol", "Bearer other"));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->code, 503);
  EXPECT_NE(next->body.find("busy"), std::string::npos);
  EXPECT_FALSE(g.Check(Req("/healthz")));
  EXPECT_FALSE(g.Check(Req("/netpol", "", "127.0.0.1", "127.0.0.1")));
  {
    std::lock_guard<std::mutex> l(r->mu);
    r->release = true;
  }
  r->cv.notify_all();
  worker.join();
  EXPECT_EQ(code, 200);
  EXPECT_FALSE(g.Check(Req("/netpol", "Bearer good")));  // now from the cache
  EXPECT_EQ(r->reviews, 1);
}

TEST_F(GateTest, NoReviewerMeansLoopbackOnly) {
  StatusGate g(StatusAuthOptions{}, nullptr);
  auto r = g.Check(Req("/netpol", "Bearer good"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->code, 401);
  EXPECT_NE(r->body.find("loopback"), std::string::npos);
  EXPECT_FALSE(g.Check(Req("/netpol", "", "127.0.0.1", "127.0.0.1")));
}

TEST(StatusAuth, ReviewBodiesAndAnswers) {
  auto tr = nlohmann::json::parse(TokenReviewBody("abc"));
  EXPECT_EQ(tr["apiVersion"], "authentication.k8s.io/v1");
  EXPECT_EQ(tr["spec"]["token"], "abc");
  // As kube-apiserver v1.36 answers (tests/k8s/fidelity_test.py compares the stand-in with it).
  auto ok = ParseTokenReview(R"({"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","metadata":{},
    "spec":{"token":"abc"},"status":{"authenticated":true,"user":{"username":"system:serviceaccount:kube-system:weftd",
    "uid":"u1","groups":["system:serviceaccounts","system:authenticated"],
    "extra":{"authentication.kubernetes.io/node-name":["n1"]}},"audiences":["https://kubernetes.default.svc"]}})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->authenticated);
  EXPECT_EQ(ok->user.extra.at("authentication.kubernetes.io/node-name"), std::vector<std::string>{"n1"});
  auto bad = ParseTokenReview(R"({"kind":"TokenReview","status":{"user":{},"error":"invalid bearer token"}})");
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->authenticated);
  EXPECT_EQ(bad->error, "invalid bearer token");
  EXPECT_FALSE(ParseTokenReview("{").ok());
  EXPECT_FALSE(ParseTokenReview(R"({"kind":"Status"})").ok());

  UserInfo u{"alice", "u1", {"g"}, {{"k", {"v"}}}};
  auto sar = nlohmann::json::parse(SubjectAccessReviewBody(u, {"get", "nodes", "weft-status", "n1"}));
  EXPECT_EQ(sar["spec"]["user"], "alice");
  EXPECT_EQ(sar["spec"]["extra"]["k"][0], "v");
  EXPECT_EQ(sar["spec"]["resourceAttributes"],
            nlohmann::json({{"verb", "get"}, {"version", "v1"}, {"resource", "nodes"}, {"subresource", "weft-status"},
                            {"name", "n1"}}));
  auto yes = ParseSubjectAccessReview(R"({"kind":"SubjectAccessReview","status":{"allowed":true,"reason":"RBAC"}})");
  ASSERT_TRUE(yes.ok());
  EXPECT_TRUE(yes->allowed);
  auto no = ParseSubjectAccessReview(R"({"kind":"SubjectAccessReview","status":{"allowed":false}})");
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(no->allowed);
  auto denied = ParseSubjectAccessReview(R"({"kind":"SubjectAccessReview","status":{"allowed":true,"denied":true}})");
  ASSERT_TRUE(denied.ok());
  EXPECT_FALSE(denied->allowed);
}

}  // namespace
}  // namespace weft::agent
