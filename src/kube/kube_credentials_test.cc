// Credentials that rotate (kube_credentials.h), the client that retries with
// them (kube_client.h) and the health they feed (auth_health.h): files in a
// temp dir, a fake clock, a scripted transport. No network, no root.

#include "kube/kube_credentials.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/auth_health.h"
#include "kube/kube_client.h"
#include "kube/kube_endpoint.h"
#include "sys/files.h"

namespace weft::kube {
namespace {

using std::chrono::seconds;
using TimePoint = std::chrono::steady_clock::time_point;

class FakeClock {
 public:
  TimePoint now = TimePoint() + std::chrono::hours(1);
  KubeCredentials::Clock fn() {
    return [this] { return now; };
  }
  void Advance(std::chrono::milliseconds d) { now += d; }
};

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/weft-creds-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_TRUE(sys::MkdirAll(dir_, 0700).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content) {
    std::string p = dir_ + "/" + name;
    EXPECT_TRUE(sys::WriteFileAtomic(p, content, 0600).ok());
    return p;
  }
  std::shared_ptr<KubeCredentials> Load(KubeCredentialFiles f) {
    auto c = KubeCredentials::Load(std::move(f), clock_.fn());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : nullptr;
  }
  std::string dir_;
  FakeClock clock_;
};

TEST_F(Files, LoadNeedsTheTokenFileOnlyAtStart) {
  KubeCredentialFiles f;
  f.token_file = dir_ + "/missing";
  EXPECT_FALSE(KubeCredentials::Load(f).ok());
  f.token_file = Write("empty", "\n");
  EXPECT_EQ(KubeCredentials::Load(f).status().reason(), Reason::kInvalidArgument);
  f.token_file = Write("token", "  t1\n");
  auto c = Load(f);
  EXPECT_EQ(c->Token(), "t1");  // trimmed
  // Later, an unreadable or empty file keeps the last good token.
  ASSERT_TRUE(sys::RemoveFile(f.token_file).ok());
  clock_.Advance(seconds(61));
  EXPECT_EQ(c->Token(), "t1");
  Write("token", "");
  EXPECT_FALSE(c->Unauthorized("t1", c->tls_generation()));
  EXPECT_EQ(c->Token(), "t1");
}

TEST_F(Files, TokenIsReReadAtMostEveryMinute) {
  KubeCredentialFiles f;
  f.token_file = Write("token", "t1\n");
  auto c = Load(f);
  Write("token", "t2\n");  // kubelet rotated it
  clock_.Advance(seconds(30));
  EXPECT_EQ(c->Token(), "t1");  // the copy is fresh enough: no read
  clock_.Advance(seconds(29));
  EXPECT_EQ(c->Token(), "t1");
  clock_.Advance(seconds(1));  // 60 s after the last read
  EXPECT_EQ(c->Token(), "t2");
  Write("token", "t3\n");
  clock_.Advance(seconds(59));
  EXPECT_EQ(c->Token(), "t2");  // the interval restarts at each read
  clock_.Advance(seconds(1));
  EXPECT_EQ(c->Token(), "t3");
}

TEST_F(Files, A401ReReadsAtOnceAndSaysWhetherARetryCanHelp) {
  KubeCredentialFiles f;
  f.token_file = Write("token", "t1\n");
  auto c = Load(f);
  uint64_t gen = c->tls_generation();
  Write("token", "t2\n");
  EXPECT_TRUE(c->Unauthorized("t1", gen));  // re-read now, not in a minute
  EXPECT_EQ(c->Token(), "t2");
  // Another client's request, sent with t1 before the re-read: already new.
  EXPECT_TRUE(c->Unauthorized("t1", gen));
  // The new token refused too and nothing changed: a retry cannot help.
  EXPECT_FALSE(c->Unauthorized("t2", gen));
}

TEST_F(Files, InlineTokenNeverChanges) {
  KubeCredentialFiles f;
  f.token = "inline";
  auto c = Load(f);
  EXPECT_EQ(c->Token(), "inline");
  EXPECT_FALSE(c->Unauthorized("inline", c->tls_generation()));
  KubeCredentialFiles none;
  EXPECT_EQ(Load(none)->Token(), "");
}

TEST_F(Files, TlsFilesChangeBumpsTheGeneration) {
  KubeCredentialFiles f;
  f.token_file = Write("token", "t1\n");
  f.tls.ca_file = Write("ca.crt", "CA1");
  f.tls.cert_file = Write("client.crt", "CERT1");
  f.tls.key_file = Write("client.key", "KEY1");
  auto c = Load(f);
  uint64_t g0 = c->tls_generation();
  EXPECT_FALSE(c->TlsFailed(g0));  // nothing changed: a new connection would not help
  Write("client.crt", "CERT2");
  Write("client.key", "KEY2");
  EXPECT_TRUE(c->TlsFailed(g0));  // read after a TLS failure
  uint64_t g1 = c->tls_generation();
  EXPECT_GT(g1, g0);
  // With the token refresh, once a minute.
  Write("ca.crt", "CA2");
  clock_.Advance(seconds(60));
  EXPECT_EQ(c->Token(), "t1");
  EXPECT_GT(c->tls_generation(), g1);
  // After a 401 with the same token: the certificate changed, so retry.
  uint64_t g2 = c->tls_generation();
  Write("client.crt", "CERT3");
  EXPECT_TRUE(c->Unauthorized("t1", g2));
}

TEST_F(Files, EndpointsShareOneCredentialSource) {
  std::string tok = Write("token", "sa-token\n");
  Write("ca.crt", "CA");
  auto in = InClusterEndpoint({"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443"}, dir_);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->server, "https://10.96.0.1:443");
  EXPECT_EQ(in->files.token_file, tok);
  ASSERT_NE(in->credentials, nullptr);
  EXPECT_EQ(in->credentials->Token(), "sa-token");
  // A copy of the endpoint (what each informer's factory holds) shares it.
  KubeEndpoint copy = *in;
  EXPECT_EQ(copy.credentials.get(), in->credentials.get());

  // kubeconfig: tokenFile relative to the kubeconfig's directory, re-read later.
  Write("kubeconfig", R"(apiVersion: v1
kind: Config
current-context: c
clusters: [{name: k, cluster: {server: "https://192.0.2.254:6443", certificate-authority: ca.crt}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {tokenFile: token}}]
)");
  auto kc = KubeconfigEndpoint(dir_ + "/kubeconfig", dir_ + "/scratch");
  ASSERT_TRUE(kc.ok()) << kc.status().ToString();
  EXPECT_EQ(kc->files.token_file, dir_ + "/token");
  EXPECT_EQ(kc->files.tls.ca_file, dir_ + "/ca.crt");
  EXPECT_EQ(kc->credentials->Token(), "sa-token");
  ASSERT_TRUE(sys::RemoveFile(tok).ok());
  EXPECT_FALSE(KubeconfigEndpoint(dir_ + "/kubeconfig", dir_ + "/scratch").ok());
}

// --- AuthHealth ----------------------------------------------------------------

TEST(AuthHealth, FailsOnlyAfterABoundOfNothingButRefusals) {
  FakeClock clock;
  AuthHealth h(clock.fn());
  EXPECT_FALSE(h.Failing(seconds(120)));
  clock.Advance(seconds(10));
  EXPECT_DOUBLE_EQ(h.SecondsSinceSuccess(), 10.0);
  h.RecordSuccess();
  EXPECT_DOUBLE_EQ(h.SecondsSinceSuccess(), 0.0);
  h.RecordRefusal("GET /api/v1/nodes: HTTP 401 Unauthorized");
  clock.Advance(seconds(119));
  h.RecordRefusal("GET /api/v1/pods: HTTP 401 Unauthorized");
  EXPECT_FALSE(h.Failing(seconds(120)));  // the run is 119 s old
  clock.Advance(seconds(1));
  auto why = h.Failing(seconds(120));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("120 s"), std::string::npos) << *why;
  EXPECT_NE(why->find("GET /api/v1/pods: HTTP 401"), std::string::npos) << *why;  // the last one
  EXPECT_EQ(h.refusals(), 2u);
  EXPECT_DOUBLE_EQ(h.SecondsSinceSuccess(), 120.0);
  // One success ends the run; a new run starts from its first refusal.
  h.RecordSuccess();
  EXPECT_FALSE(h.Failing(seconds(120)));
  h.RecordRefusal("x");
  clock.Advance(seconds(60));
  EXPECT_FALSE(h.Failing(seconds(120)));
  EXPECT_TRUE(h.Failing(seconds(60)));
}

// --- KubeClient ------------------------------------------------------------------

// Answers by the Authorization header: `accept` gets 200, anything else 401
// (or `refuse_status`). Records what was sent.
class ScriptedTransport : public sys::HttpTransport {
 public:
  std::string accept;
  long refuse_status = 401;
  std::vector<std::string> sent;     // Authorization header values ("" = none)
  std::vector<std::string> urls;
  int resets = 0;
  int tls_failures = 0;              // the next n requests fail the handshake
  std::function<void()> on_request;  // runs before each answer
  std::vector<std::string> lines;    // a watch's lines

  Result<sys::HttpResponse> Do(const sys::HttpRequest& req) override {
    std::string auth;
    for (const auto& h : req.headers)
      if (h.rfind("Authorization: Bearer ", 0) == 0) auth = h.substr(22);
    sent.push_back(auth);
    urls.push_back(req.url);
    if (on_request) on_request();
    if (tls_failures > 0) {
      --tls_failures;
      return sys::TlsFailure(req.method + " " + req.url, "OpenSSL: tlsv1 alert unknown ca");
    }
    sys::HttpResponse r;
    r.status = auth == accept ? 200 : refuse_status;
    r.body = r.status == 200 ? "{}" : R"({"kind":"Status","message":"Unauthorized"})";
    return r;
  }
  Result<sys::HttpResponse> Stream(const sys::HttpRequest& req, const std::function<bool(std::string_view)>& on_line,
                              const std::atomic<bool>&, std::chrono::milliseconds) override {
    auto r = Do(req);
    if (r.ok() && r->status == 200)
      for (const auto& l : lines) on_line(l);
    return r;
  }
  void Reset() override { resets++; }
};

class Client : public Files {
 protected:
  // A client over scripted `t` (kept for inspection).
  KubeClient Make(ScriptedTransport** t) {
    auto owned = std::make_unique<ScriptedTransport>();
    *t = owned.get();
    return KubeClient(endpoint_, std::move(owned));
  }
  void SetUp() override {
    Files::SetUp();
    if (HasFatalFailure()) return;
    KubeCredentialFiles f;
    f.token_file = Write("token", "t1\n");
    f.tls.cert_file = Write("client.crt", "CERT1");
    endpoint_.server = "https://api";
    endpoint_.files = f;
    endpoint_.credentials = Load(f);
  }
  static sys::HttpRequest Get(const std::string& path) {
    sys::HttpRequest r;
    r.url = path;
    return r;
  }
  KubeEndpoint endpoint_;
};

TEST_F(Client, A401IsRetriedOnceWithTheRotatedToken) {
  ScriptedTransport* t;
  KubeClient c = Make(&t);
  t->accept = "t1";
  auto r = c.Do(Get("/api/v1/nodes?limit=500"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(t->urls[0], "https://api/api/v1/nodes?limit=500");
  // kubelet rotates the token; the server refuses the old one at once.
  Write("token", "t2\n");
  t->accept = "t2";
  r = c.Do(Get("/api/v1/nodes"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(t->sent, (std::vector<std::string>{"t1", "t1", "t2"}));
  auto& health = endpoint_.credentials->health();
  EXPECT_EQ(health.refusals(), 1u);
  clock_.Advance(std::chrono::minutes(10));
  EXPECT_FALSE(health.Failing(seconds(120)));  // the retry succeeded
}

TEST_F(Client, AnotherClientsReReadIsUsedWithoutReadingAgain) {
  ScriptedTransport *a, *b;
  KubeClient ca = Make(&a);
  KubeClient cb = Make(&b);
  a->accept = b->accept = "t2";
  Write("token", "t2\n");
  ASSERT_EQ(ca.Do(Get("/api/v1/pods"))->status, 200);  // 401 with t1, re-read, 200 with t2
  ASSERT_EQ(cb.Do(Get("/api/v1/namespaces"))->status, 200);
  EXPECT_EQ(a->sent, (std::vector<std::string>{"t1", "t2"}));
  EXPECT_EQ(b->sent, (std::vector<std::string>{"t2"}));  // shared: no stale copy per thread
}

TEST_F(Client, RetriesOnlyOnceAndOnlyWhenSomethingChanged) {
  ScriptedTransport* t;
  KubeClient c = Make(&t);
  t->accept = "never";
  auto r = c.Do(Get("/api/v1/nodes"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(t->sent.size(), 1u);  // the file did not change: no retry
  // A file that changes on every request: still one retry, then the 401.
  int n = 0;
  t->on_request = [&] { Write("token", "x" + std::to_string(++n) + "\n"); };
  r = c.Do(Get("/api/v1/nodes"));
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(t->sent.size(), 3u);
  // 403 is RBAC, not a stale token: recorded, never retried.
  t->on_request = nullptr;
  t->refuse_status = 403;
  t->sent.clear();
  r = c.Do(Get("/api/v1/nodes"));
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(t->sent.size(), 1u);
  auto& health = endpoint_.credentials->health();
  EXPECT_EQ(health.refusals(), 4u);
  clock_.Advance(seconds(120));
  auto why = health.Failing(seconds(120));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("GET /api/v1/nodes: HTTP 403 Forbidden"), std::string::npos) << *why;
}

TEST_F(Client, ATlsFailureRetriesOnANewConnectionWhenTheFilesChanged) {
  ScriptedTransport* t;
  KubeClient c = Make(&t);
  t->accept = "t1";
  // The handshake fails and the files are as before: no retry.
  t->tls_failures = 1;
  auto r = c.Do(Get("/api/v1/nodes"));
  EXPECT_TRUE(sys::IsTlsFailure(r.status()));
  EXPECT_EQ(t->sent.size(), 1u);
  // The certificate was rotated: the retry goes out on a new connection.
  Write("client.crt", "CERT2");
  t->tls_failures = 1;
  r = c.Do(Get("/api/v1/nodes"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(t->sent.size(), 3u);
  EXPECT_EQ(t->resets, 1);
  EXPECT_EQ(endpoint_.credentials->health().refusals(), 2u);
  // Files changed under another client (seen by the minute's re-read):
  // this client opens a new connection before its next request.
  Write("client.crt", "CERT3");
  clock_.Advance(seconds(60));
  ASSERT_EQ(c.Do(Get("/api/v1/nodes"))->status, 200);
  EXPECT_EQ(t->resets, 2);
  EXPECT_EQ(t->sent.size(), 4u);
}

TEST_F(Client, WatchLinesCountAsSuccessAndA401WatchIsRetried) {
  ScriptedTransport* t;
  KubeClient c = Make(&t);
  t->accept = "t2";
  t->lines = {R"({"type":"BOOKMARK"})"};
  Write("token", "t2\n");
  std::atomic<bool> stop{false};
  int got = 0;
  auto r = c.Stream(Get("/api/v1/nodes?watch=1"), [&](std::string_view) { return ++got > 0; }, stop, seconds(0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(got, 1);
  EXPECT_EQ(t->sent, (std::vector<std::string>{"t1", "t2"}));
}

}  // namespace
}  // namespace weft::kube
