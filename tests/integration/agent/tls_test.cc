// Client certificate and CA files that rotate under a running client, over
// real TLS (libcurl against cpp-httplib's SSLServer, which verifies client
// certificates), inside a test netns:
//   - a CA file fixed after a failed handshake is read by the next request
//     (libcurl caches the CA store per handle: the handle must go);
//   - a client certificate the server rejects, then a good one;
//   - the API server's per-request check (an expired certificate on a live
//     connection gets 401): the 401 re-reads the files and the retry goes
//     out on a new connection with the new certificate;
//   - etcd's client: a rejected certificate, then the rotated one.

#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <fstream>
#include <mutex>
#include <thread>

#include "agent/etcd.h"
#include "kube/kube_client.h"
#include "sys/http.h"
#include "sys/netns.h"
#include "testutil/netns_fixture.h"

namespace weft::testing {
namespace {

void Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out, err;
  ASSERT_EQ(Cmd(argv, &out, &err), 0) << err;
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class TlsRotation : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::once_flag once;
    std::call_once(once, [] { ASSERT_TRUE(sys::InitHttp().ok()); });
    dir_ = TempDir("tls");
    ns_ = std::make_unique<TestNetns>("tls");
    ASSERT_EQ(ns_->Exec({"ip", "link", "set", "lo", "up"}), 0);
    auto h = sys::Netns::Open(ns_->path());
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    netns_ = std::make_unique<sys::Netns>(std::move(h).value());
    MakeCa("ca-a");
    MakeCa("ca-b");
    MakeCert("server", "ca-a", "127.0.0.1", "serverAuth");
    MakeCert("weftd-old", "ca-a", "", "clientAuth");
    MakeCert("weftd-new", "ca-a", "", "clientAuth");
    MakeCert("rogue", "ca-b", "", "clientAuth");
    StartServer();
  }

  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
    netns_.reset();
    ns_.reset();
    RemoveTree(dir_);
  }

  void MakeCa(const std::string& name) {
    Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             dir_ + "/" + name + ".key", "-out", dir_ + "/" + name + ".crt", "-subj", "/CN=" + name, "-days", "2"});
  }
  void MakeCert(const std::string& cn, const std::string& ca, const std::string& ip, const std::string& usage) {
    std::string base = dir_ + "/" + cn;
    Openssl({"req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             base + ".key", "-out", base + ".csr", "-subj", "/CN=" + cn});
    WriteText(base + ".ext", (ip.empty() ? "" : "subjectAltName=IP:" + ip + "\n") + "extendedKeyUsage=" + usage +
                                 "\nbasicConstraints=CA:FALSE\n");
    Openssl({"x509", "-req", "-in", base + ".csr", "-CA", dir_ + "/" + ca + ".crt", "-CAkey", dir_ + "/" + ca + ".key",
             "-CAcreateserial", "-out", base + ".crt", "-days", "2", "-extfile", base + ".ext"});
  }

  // What the client reads: files replaced as kubelet or cert-manager would.
  void UseCa(const std::string& ca) { WriteText(dir_ + "/client-ca.crt", ReadText(dir_ + "/" + ca + ".crt")); }
  void UseCert(const std::string& cn) {
    WriteText(dir_ + "/client.crt", ReadText(dir_ + "/" + cn + ".crt"));
    WriteText(dir_ + "/client.key", ReadText(dir_ + "/" + cn + ".key"));
  }
  sys::TlsOptions ClientTls() const {
    return {dir_ + "/client-ca.crt", dir_ + "/client.crt", dir_ + "/client.key", false};
  }

  // Requires a client certificate from ca-a. /api/v1/nodes answers 401 to
  // CN=weftd-old, as the API server does to an expired certificate on a live
  // connection; /v3/kv/range is etcd's gateway.
  void StartServer() {
    server_ = std::make_unique<httplib::SSLServer>((dir_ + "/server.crt").c_str(), (dir_ + "/server.key").c_str(),
                                                   (dir_ + "/ca-a.crt").c_str());
    ASSERT_TRUE(server_->is_valid());
    server_->Get("/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
      std::string cn = PeerCn(req);
      {
        std::lock_guard lock(mu_);
        seen_.push_back(cn);
      }
      res.status = cn == "weftd-old" ? 401 : 200;
      res.set_content(res.status == 200 ? R"({"kind":"NodeList","items":[]})"
                                        : R"({"kind":"Status","message":"Unauthorized"})",
                      "application/json");
    });
    server_->Post("/v3/kv/range", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"header":{"revision":"7"},"kvs":[]})", "application/json");
    });
    Status st = sys::RunInNetns(*netns_, [&] {
      port_ = server_->bind_to_any_port("127.0.0.1");
      return port_ > 0 ? Status::Ok() : Status::Error(Reason::kFailed, Domain::kFile, "bind");
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    for (int i = 0; i < 500 && !server_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(server_->is_running());
  }

  static std::string PeerCn(const httplib::Request& req) {
    if (!req.ssl) return "";
    X509* cert = SSL_get_peer_certificate(req.ssl);
    if (!cert) return "";
    char buf[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, sizeof buf);
    X509_free(cert);
    return buf;
  }

  std::string url(const std::string& path) const { return "https://127.0.0.1:" + std::to_string(port_) + path; }

  // `fn` on a thread inside the test netns (where the server listens).
  template <typename F>
  auto InNetns(F fn) {
    decltype(fn()) out = Status::Error(Reason::kInternal, Domain::kNone, "not run");
    Status st = sys::RunInNetns(*netns_, [&] {
      out = fn();
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }

  Result<sys::HttpResponse> Get(sys::HttpClient& http, const std::string& path) {
    sys::HttpRequest req;
    req.url = url(path);
    return InNetns([&] { return http.Do(req); });
  }

  std::vector<std::string> Seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

  std::string dir_;
  std::unique_ptr<TestNetns> ns_;
  std::unique_ptr<sys::Netns> netns_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<std::string> seen_;  // peer CNs of /api/v1/nodes requests
};

TEST_F(TlsRotation, CaFileFixedAfterAFailedHandshakeIsReadByTheNextRequest) {
  UseCa("ca-b");  // not the server's CA
  UseCert("weftd-new");
  sys::HttpClient http(ClientTls());
  auto r = Get(http, "/api/v1/nodes");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(sys::IsTlsFailure(r.status())) << r.status().ToString();
  UseCa("ca-a");
  r = Get(http, "/api/v1/nodes");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
}

// The server's CA rotates (the server now presents a certificate from
// ca-b; the CA file is updated) on a handle that already verified the old
// one: a new connection loads the new file (libcurl 7.88 loads it per
// connection; were the store cached in the handle, the first handshake would
// fail and drop the handle, and the second would load it).
TEST_F(TlsRotation, CaRotatedAfterASuccessIsFollowed) {
  MakeCert("server-b", "ca-b", "127.0.0.1", "serverAuth");
  httplib::SSLServer b((dir_ + "/server-b.crt").c_str(), (dir_ + "/server-b.key").c_str());
  b.set_keep_alive_timeout(1);
  b.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
  int port_b = 0;
  ASSERT_TRUE(sys::RunInNetns(*netns_, [&] {
                port_b = b.bind_to_any_port("127.0.0.1");
                return Status::Ok();
              }).ok());
  std::thread tb([&] { b.listen_after_bind(); });
  UseCa("ca-a");
  UseCert("weftd-new");
  sys::HttpClient http(ClientTls());
  ASSERT_EQ(Get(http, "/api/v1/nodes")->status, 200);
  UseCa("ca-b");
  sys::HttpRequest req;
  req.url = "https://127.0.0.1:" + std::to_string(port_b) + "/healthz";
  auto first = InNetns([&] { return http.Do(req); });
  auto second = InNetns([&] { return http.Do(req); });
  http.Reset();  // let the server's worker go
  b.stop();
  tb.join();
  std::cout << "TLS: first request after the CA rotation: "
            << (first.ok() ? std::to_string(first->status) : first.status().ToString()) << "\n";
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->status, 200);
}

TEST_F(TlsRotation, ClientCertificateRejectedThenRotated) {
  UseCa("ca-a");
  UseCert("rogue");  // signed by a CA the server does not trust
  sys::HttpClient http(ClientTls());
  auto r = Get(http, "/api/v1/nodes");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(sys::IsTlsFailure(r.status())) << r.status().ToString();
  std::cout << "TLS: a rejected client certificate reads as: " << r.status().ToString() << "\n";
  UseCert("weftd-new");
  r = Get(http, "/api/v1/nodes");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Seen(), (std::vector<std::string>{"weftd-new"}));
}

// The certificate is rotated while a connection made with the old one is
// alive; the server refuses the old one per request (401). The 401 re-reads
// the files, and the retry goes out on a new connection with the new one.
TEST_F(TlsRotation, A401AfterCertificateRotationRetriesOnANewConnection) {
  UseCa("ca-a");
  UseCert("weftd-old");
  kube::KubeEndpoint ep;
  ep.server = url("");
  ep.files.tls = ClientTls();
  auto creds = kube::KubeCredentials::Load(ep.files);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  ep.credentials = *creds;
  kube::KubeClient client(ep);
  auto get = [&] {
    sys::HttpRequest req;
    req.url = "/api/v1/nodes";
    return InNetns([&] { return client.Do(req); });
  };
  auto r = get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 401);  // the files did not change: no retry
  EXPECT_EQ(Seen(), (std::vector<std::string>{"weftd-old"}));

  UseCert("weftd-new");
  r = get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  // old (refused: the kept-alive connection still presents the old
  // certificate), then new on a new connection.
  EXPECT_EQ(Seen(), (std::vector<std::string>{"weftd-old", "weftd-old", "weftd-new"}));
  EXPECT_EQ(ep.credentials->health().refusals(), 2u);
  EXPECT_FALSE(ep.credentials->health().Failing(std::chrono::milliseconds(0)));
}

TEST_F(TlsRotation, EtcdClientFollowsARotatedCertificate) {
  UseCa("ca-a");
  UseCert("rogue");
  AuthHealth health;
  etcd::EtcdClient etcd({url("")}, ClientTls(), &health);
  auto r = InNetns([&] { return etcd.Range("/weft/network/subnets/", "/weft/network/subnets0"); });
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(sys::IsTlsFailure(r.status())) << r.status().ToString();
  EXPECT_EQ(health.refusals(), 2u);  // retried once on a new connection
  EXPECT_TRUE(health.Failing(std::chrono::milliseconds(0)));
  UseCert("weftd-new");
  r = InNetns([&] { return etcd.Range("/weft/network/subnets/", "/weft/network/subnets0"); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->revision, 7);
  EXPECT_FALSE(health.Failing(std::chrono::milliseconds(0)));
}

}  // namespace
}  // namespace weft::testing
