// services::HealthServer (the healthCheckNodePort servers) in a network
// namespace the test creates: started there as weftd starts it in the
// node's, asked with curl from inside it on every address of both
// families. 200 and 503 with kube-proxy's body and headers, counts changed
// in place, a removed port closed (and bound again when wanted back), a port
// another server holds reported and retried, and no thread left behind.

#include "services/health_server.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sys/netns.h"
#include "testutil/netns_fixture.h"

namespace weft {
namespace {

using services::HealthCheck;
using services::HealthServer;
using services::HealthSyncResult;
using testing::Cmd;
using testing::TestNetns;

// The calling process's thread count (/proc/self/status).
int Threads() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

struct Reply {
  int curl_exit = -1;  // 0: answered; 7: refused
  int code = 0;
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;
};

class HealthServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = std::make_unique<TestNetns>("hcnode");
    auto ip = [&](std::vector<std::string> args) {
      args.insert(args.begin(), {"ip", "-n", ns_->name()});
      std::string err;
      ASSERT_EQ(Cmd(args, nullptr, &err), 0) << err;
    };
    // A node address of each family beside loopback's (on a veth pair
    // whose both ends stay here: the kernel may have no dummy links).
    ASSERT_NO_FATAL_FAILURE(ip({"link", "set", "lo", "up"}));
    ASSERT_NO_FATAL_FAILURE(ip({"link", "add", "hc0", "type", "veth", "peer", "name", "hc1"}));
    ASSERT_NO_FATAL_FAILURE(ip({"addr", "add", "10.251.0.1/24", "dev", "hc0"}));
    ASSERT_NO_FATAL_FAILURE(ip({"addr", "add", "fd00:251::1/64", "dev", "hc0", "nodad"}));
    ASSERT_NO_FATAL_FAILURE(ip({"link", "set", "hc0", "up"}));
    ASSERT_NO_FATAL_FAILURE(ip({"link", "set", "hc1", "up"}));
  }

  // Sync, on a thread in the test's namespace.
  HealthSyncResult Sync(HealthServer& s, const std::map<uint16_t, HealthCheck>& want) {
    HealthSyncResult r;
    auto ns = sys::Netns::Open(ns_->path());
    EXPECT_TRUE(ns.ok()) << ns.status().ToString();
    if (!ns.ok()) return r;
    Status st = sys::RunInNetns(*ns, [&] {
      r = s.Sync(want);
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return r;
  }

  // `method` `url` with curl from inside the namespace.
  Reply Ask(const std::string& url, const std::string& method = "GET") {
    Reply r;
    std::string out, err;
    std::vector<std::string> argv = {"ip", "netns", "exec", ns_->name(), "curl", "-sS", "-i", "--max-time", "5"};
    if (method == "HEAD")
      argv.push_back("-I");
    else if (method == "POST")  // with a body: cpp-httplib refuses a POST without Content-Length (400)
      argv.insert(argv.end(), {"--data-raw", "x"});
    else
      argv.insert(argv.end(), {"-X", method});
    argv.push_back(url);
    r.curl_exit = Cmd(argv, &out, &err);
    if (r.curl_exit != 0) return r;
    auto split = out.find("\r\n\r\n");
    std::istringstream head(out.substr(0, split));
    std::string line;
    std::getline(head, line);  // HTTP/1.1 200 OK
    if (line.size() > 9) r.code = std::stoi(line.substr(9, 3));
    while (std::getline(head, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string k = line.substr(0, colon);
      for (auto& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[k] = line.substr(colon + 2);
    }
    if (split != std::string::npos) r.body = out.substr(split + 4);
    return r;
  }

  std::unique_ptr<TestNetns> ns_;
};

nlohmann::json Body(const std::string& ns, const std::string& name, int n) {
  return {{"service", {{"namespace", ns}, {"name", name}}}, {"localEndpoints", n}, {"serviceProxyHealthy", true}};
}

TEST_F(HealthServerTest, AnswersOnEveryAddressAndClosesWhatIsNoLongerWanted) {
  const int threads_before = Threads();
  {
    HealthServer s;
    auto r = Sync(s, {{31001, {"default", "web", 2}}, {31002, {"default", "idle", 0}}});
    EXPECT_EQ(r.opened, (std::vector<uint16_t>{31001, 31002}));
    EXPECT_TRUE(r.failed.empty()) << r.failed.begin()->second.ToString();

    // Every node address, both families, on one socket per port.
    for (const char* host : {"10.251.0.1", "[fd00:251::1]", "127.0.0.1", "[::1]"}) {
      Reply a = Ask(std::string("http://") + host + ":31001/");
      ASSERT_EQ(a.curl_exit, 0) << host;
      EXPECT_EQ(a.code, 200) << host;
      EXPECT_EQ(a.headers["content-type"], "application/json") << host;
      EXPECT_EQ(a.headers["x-content-type-options"], "nosniff") << host;
      EXPECT_EQ(a.body, services::ServiceHealthAnswer({"default", "web", 2}).body) << host;
      EXPECT_EQ(nlohmann::json::parse(a.body), Body("default", "web", 2));
    }
    // Any path, any method, as kube-proxy's handler; HEAD gets the headers.
    for (const char* method : {"GET", "POST", "DELETE"}) {
      Reply a = Ask("http://10.251.0.1:31001/healthz?x=1", method);
      EXPECT_EQ(a.code, 200) << method;
      EXPECT_EQ(a.body, services::ServiceHealthAnswer({"default", "web", 2}).body) << method;
    }
    Reply head = Ask("http://10.251.0.1:31001/", "HEAD");
    EXPECT_EQ(head.code, 200);
    EXPECT_EQ(head.headers["content-type"], "application/json");
    // No local endpoint: 503, with the same body.
    Reply idle = Ask("http://[fd00:251::1]:31002/");
    EXPECT_EQ(idle.code, 503);
    EXPECT_EQ(idle.headers["x-content-type-options"], "nosniff");
    EXPECT_EQ(nlohmann::json::parse(idle.body), Body("default", "idle", 0));

    auto st = s.StateOf("default", "web");
    ASSERT_TRUE(st);
    EXPECT_EQ(st->port, 31001);
    EXPECT_TRUE(st->listening);
    EXPECT_EQ(st->address, "[::]");
    EXPECT_EQ(st->code, 200);
    EXPECT_EQ(st->check.local_endpoints, 2);

    // Counts change in place: no port opens or closes. The local endpoints
    // left (only terminating ones: the caller counts none) and came.
    r = Sync(s, {{31001, {"default", "web", 0}}, {31002, {"default", "idle", 1}}});
    EXPECT_TRUE(r.opened.empty());
    EXPECT_TRUE(r.closed.empty());
    EXPECT_EQ(Ask("http://10.251.0.1:31001/").code, 503);
    Reply now = Ask("http://10.251.0.1:31002/");
    EXPECT_EQ(now.code, 200);
    EXPECT_EQ(nlohmann::json::parse(now.body), Body("default", "idle", 1));
    EXPECT_EQ(s.StateOf("default", "web")->code, 503);

    // A port no longer wanted closes; the other stays.
    r = Sync(s, {{31001, {"default", "web", 1}}});
    EXPECT_EQ(r.closed, (std::vector<uint16_t>{31002}));
    EXPECT_EQ(Ask("http://10.251.0.1:31002/").curl_exit, 7);  // refused
    EXPECT_EQ(Ask("http://[::1]:31002/").curl_exit, 7);
    EXPECT_EQ(Ask("http://10.251.0.1:31001/").code, 200);
    EXPECT_FALSE(s.StateOf("default", "idle"));
    ASSERT_EQ(s.States().size(), 1u);

    // Wanted back (another Service now): bound again at once.
    r = Sync(s, {{31001, {"default", "web", 1}}, {31002, {"team", "api", 4}}});
    EXPECT_EQ(r.opened, (std::vector<uint16_t>{31002}));
    EXPECT_EQ(Ask("http://10.251.0.1:31002/").body, services::ServiceHealthAnswer({"team", "api", 4}).body);
  }
  // Gone with the server: its ports and every thread it started.
  EXPECT_EQ(Ask("http://10.251.0.1:31001/").curl_exit, 7);
  EXPECT_EQ(Threads(), threads_before);
}

// A port another server holds: reported, logged, not fatal; the other ports
// open; tried again at the next Sync, which binds it once it is free.
TEST_F(HealthServerTest, APortInUseIsReportedAndTriedAgain) {
  auto first = std::make_unique<HealthServer>();
  auto r = Sync(*first, {{31005, {"default", "old", 1}}});
  ASSERT_EQ(r.opened, (std::vector<uint16_t>{31005}));

  HealthServer s;
  r = Sync(s, {{31005, {"default", "web", 1}}, {31006, {"default", "db", 1}}});
  EXPECT_EQ(r.opened, (std::vector<uint16_t>{31006}));
  ASSERT_EQ(r.failed.count(31005), 1u);
  EXPECT_EQ(r.failed.at(31005).sys_errno(), EADDRINUSE) << r.failed.at(31005).ToString();
  EXPECT_NE(r.failed.at(31005).ToString().find("default/web"), std::string::npos) << r.failed.at(31005).ToString();
  auto st = s.StateOf("default", "web");
  ASSERT_TRUE(st);
  EXPECT_FALSE(st->listening);
  EXPECT_NE(st->error.find("31005"), std::string::npos) << st->error;
  // The holder still answers; the new server's other port too.
  EXPECT_EQ(nlohmann::json::parse(Ask("http://10.251.0.1:31005/").body), Body("default", "old", 1));
  EXPECT_EQ(Ask("http://10.251.0.1:31006/").code, 200);

  first.reset();
  r = Sync(s, {{31005, {"default", "web", 1}}, {31006, {"default", "db", 1}}});
  EXPECT_EQ(r.opened, (std::vector<uint16_t>{31005}));
  EXPECT_TRUE(r.failed.empty());
  EXPECT_TRUE(s.StateOf("default", "web")->listening);
  EXPECT_EQ(s.StateOf("default", "web")->error, "");
  EXPECT_EQ(nlohmann::json::parse(Ask("http://10.251.0.1:31005/").body), Body("default", "web", 1));
}

}  // namespace
}  // namespace weft
