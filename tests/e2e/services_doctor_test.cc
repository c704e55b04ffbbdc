// `weftctl service explain` and doctor's services-table check on the
// virtual cluster (issue 31 §2, docs/weftctl.md): the NetworkPolicy
// harness's two nodes with weftd --service-proxy true (the fixture copied
// small from services_test.cc, which another suite owns), Services and
// EndpointSlices posted to the stand-in API server; no traffic is sent:
//   - explain for a Service with two endpoints (one per node, affinity) and
//     one without: endpoints, map -> chains -> DNAT or REJECTED, the chain
//     names, and with --from NetworkPolicy's word on each endpoint;
//   - doctor names the Service whose map element was deleted and the one
//     whose chain got a stale rule (changes weftd's keeper does not watch,
//     so only doctor or the periodic check sees them), --fix restores both;
//   - with the proxy off (a second cluster): explain exits 4, doctor notes the skip.
// Pods: s/client on n1, s/ep1 on n2, s/ep2 on n1.

#include <gtest/gtest.h>

#include <map>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "e2e/netpol_harness.h"

namespace weft::testing::netpol {
namespace {

using json = nlohmann::json;

constexpr int kTargetPort = 8080;
constexpr char kWebIp[] = "10.96.20.10";
constexpr char kIdleIp[] = "10.96.20.11";
constexpr char kApiIp[] = "10.96.20.12";

json ServiceObject(const std::string& name, const std::string& ip, bool affinity = false) {
  json port = {{"name", "http"}, {"port", 80}, {"targetPort", kTargetPort}, {"protocol", "TCP"}};
  json spec = {{"type", "ClusterIP"}, {"clusterIP", ip}, {"clusterIPs", {ip}}, {"ports", {port}}};
  if (affinity) spec["sessionAffinity"] = "ClientIP";
  return {{"kind", "Service"}, {"metadata", {{"name", name}, {"namespace", "s"}}}, {"spec", spec}};
}

json SliceObject(const std::string& service, const std::vector<const NetpolPod*>& pods) {
  json eps = json::array();
  for (const NetpolPod* p : pods)
    eps.push_back({{"addresses", {p->ip()}},
                   {"conditions", {{"ready", true}, {"serving", true}, {"terminating", false}}},
                   {"nodeName", p->node->name},
                   {"targetRef", {{"kind", "Pod"}, {"namespace", p->ns}, {"name", p->name}}}});
  return {{"kind", "EndpointSlice"},
          {"metadata",
           {{"name", service + "-abcde"},
            {"namespace", "s"},
            {"labels", {{"kubernetes.io/service-name", service}}}}},
          {"addressType", "IPv4"},
          {"ports", {{{"name", "http"}, {"port", kTargetPort}, {"protocol", "TCP"}}}},
          {"endpoints", eps}};
}

struct CtlRun {
  int code = -1;
  std::string out, err;
  json j;
};

class ServicesDoctorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.pods = {"s/client", "s/ep1", "s/ep2"};  // n1, n2, n1
    // A long resync: what the cases break stays broken until doctor sees it.
    o.weftd_flags = {"--service-proxy", "true", "--resync-period", "300"};
    cluster_ = std::make_unique<NetpolCluster>(o);
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    ASSERT_TRUE(cluster_);
    c_ = cluster_.get();
    ASSERT_EQ(c_->error(), "") << c_->Diagnostics();
    ASSERT_TRUE(c_->Healthy()) << c_->Diagnostics();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << Diagnostics();
    for (const auto& [kind, name] : created_) c_->api().Delete(kind, "s", name);
    created_.clear();
  }

  void Apply(const json& obj) {
    c_->api().Apply(obj);
    created_.emplace(obj["kind"].get<std::string>(), obj["metadata"]["name"].get<std::string>());
  }
  const NetpolPod& Pod(const std::string& key) { return c_->pod(key); }

  // weftctl [--json] ARGS... inside node n1.
  CtlRun Weftctl(const std::vector<std::string>& args, bool as_json) {
    WeftNode& n = c_->node(0);
    std::vector<std::string> argv = {"ip", "netns", "exec", n.ns.name(), BinaryPath("weftctl"), "--conf-dir",
                                     n.conf_dir()};
    if (as_json) argv.push_back("--json");
    argv.insert(argv.end(), args.begin(), args.end());
    CtlRun r;
    r.code = Cmd(argv, &r.out, &r.err);
    if (as_json) r.j = json::parse(r.out, nullptr, false);
    return r;
  }
  CtlRun Doctor(bool fix) {
    std::vector<std::string> args = {"doctor", "--weftd-state-dir", c_->node(0).dir + "/state"};
    if (fix) args.push_back("--fix");
    return Weftctl(args, true);
  }
  // The subjects of the services-table findings of `list` ("findings" or "remaining").
  static std::set<std::string> ServiceFindings(const CtlRun& r, const char* list = "findings") {
    std::set<std::string> out;
    if (!r.j.is_object() || !r.j.contains(list)) return {"(no JSON: " + r.out + r.err + ")"};
    for (const auto& f : r.j[list])
      if (f.value("kind", "") == "services-table") out.insert(f.value("subject", ""));
    return out;
  }
  // Until n1's weftd explains `service` with `endpoints` endpoints on its one port.
  json WaitExplained(const std::string& service, size_t endpoints) {
    json last;
    WaitFor(
        [&] {
          CtlRun r = Weftctl({"service", "explain", "s/" + service}, true);
          last = r.j;
          return r.code == 0 && r.j.is_object() && r.j["ports"].size() == 1 &&
                 r.j["ports"][0]["endpoints"].size() == endpoints;
        },
        10000, 100);
    return last;
  }
  std::string Nft(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"nft"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    int code = c_->node(0).ns.Exec(argv, &out);
    EXPECT_EQ(code, 0) << "nft failed: " << out;
    return out;
  }

  std::string Diagnostics() {
    std::string out = c_->Diagnostics();
    std::string t;
    c_->node(0).ns.Exec({"nft", "list", "table", "inet", "weft-services"}, &t);
    return out + "---- n1 nft list table inet weft-services ----\n" + t + "\n";
  }

  static std::unique_ptr<NetpolCluster> cluster_;
  NetpolCluster* c_ = nullptr;
  std::set<std::pair<std::string, std::string>> created_;
};

std::unique_ptr<NetpolCluster> ServicesDoctorTest::cluster_;

TEST_F(ServicesDoctorTest, ExplainShowsEndpointsChainsAndTheRejectOfAServiceWithoutEndpoints) {
  const NetpolPod &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  Apply(ServiceObject("web", kWebIp, /*affinity=*/true));
  Apply(SliceObject("web", {&ep1, &ep2}));
  Apply(ServiceObject("idle", kIdleIp));

  json web = WaitExplained("web", 2);
  ASSERT_TRUE(web.is_object() && web["ports"].size() == 1) << web.dump(2);
  const json& port = web["ports"][0];
  EXPECT_EQ(web["sessionAffinity"], "ClientIP");
  EXPECT_EQ(web["affinityTimeoutSeconds"], 10800);
  std::map<std::string, bool> local;
  for (const auto& e : port["endpoints"]) local[e["address"]] = e["local"];
  EXPECT_EQ(local, (std::map<std::string, bool>{{ep1.ip(), false}, {ep2.ip(), true}}));  // n1's view
  ASSERT_EQ(port["paths"].size(), 1u);
  EXPECT_EQ(port["paths"][0]["verdict"], "dnat");
  EXPECT_EQ(port["paths"][0]["endpoints"].size(), 2u);
  EXPECT_EQ(port["chains"].size(), 3u);  // svc4- and two ep4-
  // The chain names are the kernel's: each is in n1's table.
  std::string table = Nft({"list", "table", "inet", "weft-services"});
  for (const auto& ch : port["chains"])
    EXPECT_NE(table.find("chain " + ch.get<std::string>() + " {"), std::string::npos) << ch;

  CtlRun text = Weftctl({"service", "explain", "s/web", "--from", "s/client"}, false);
  EXPECT_EQ(text.code, 0) << text.out << text.err;
  std::cout << "---- weftctl service explain s/web --from s/client (n1) ----\n" << text.out;
  for (const std::string& want :
       {std::string("Service s/web (ClusterIP)"), std::string("sessionAffinity ClientIP (timeout 10800 s)"),
        ep1.ip() + ":8080  elsewhere  ready", ep2.ip() + ":8080  on this node  ready",
        std::string("map service-ips4: nat prerouting/output, chain services: ") + kWebIp + " . tcp . 80 : goto svc4-",
        std::string("one of 2 endpoint(s) at random"), std::string("=> translated to an endpoint"),
        std::string("weftd enforces NetworkPolicy: it judges the translated destination"),
        "s/client -> " + ep1.ip() + ":8080/tcp: ALLOWED"})
    EXPECT_NE(text.out.find(want), std::string::npos) << "no \"" << want << "\" in:\n" << text.out;

  json idle = WaitExplained("idle", 0);
  ASSERT_TRUE(idle.is_object() && idle["ports"].size() == 1) << idle.dump(2);
  EXPECT_EQ(idle["ports"][0]["paths"][0]["verdict"], "reject");
  CtlRun idle_text = Weftctl({"service", "explain", "s/idle"}, false);
  EXPECT_EQ(idle_text.code, 0) << idle_text.err;
  std::cout << "---- weftctl service explain s/idle (n1) ----\n" << idle_text.out;
  EXPECT_NE(idle_text.out.find("map no-endpoint-services4: filter hooks"), std::string::npos) << idle_text.out;
  EXPECT_NE(idle_text.out.find("=> REJECTED (connection refused)"), std::string::npos) << idle_text.out;
  EXPECT_NE(idle_text.out.find("not shown: whether a given client may reach each endpoint"), std::string::npos)
      << idle_text.out;

  CtlRun unknown = Weftctl({"service", "explain", "s/nothing"}, false);
  EXPECT_EQ(unknown.code, 3) << unknown.out << unknown.err;
  EXPECT_NE(unknown.err.find("Service s/nothing is not known"), std::string::npos) << unknown.err;
  CtlRun bad = Weftctl({"service", "explain", "nothing"}, false);
  EXPECT_EQ(bad.code, 2) << bad.out << bad.err;
}

TEST_F(ServicesDoctorTest, DoctorNamesEachServiceWhoseRulesAreMissingOrStaleAndFixRestoresThem) {
  const NetpolPod &ep1 = Pod("s/ep1"), &ep2 = Pod("s/ep2");
  Apply(ServiceObject("web", kWebIp));
  Apply(SliceObject("web", {&ep1, &ep2}));
  Apply(ServiceObject("api", kApiIp));
  Apply(SliceObject("api", {&ep1}));
  ASSERT_TRUE(WaitExplained("web", 2).is_object());
  json api = WaitExplained("api", 1);
  ASSERT_TRUE(api.is_object() && api["ports"].size() == 1) << api.dump(2);

  CtlRun clean = Doctor(false);
  EXPECT_EQ(ServiceFindings(clean), std::set<std::string>{}) << clean.out << clean.err;
  bool compared = false;
  for (const auto& n : clean.j.value("notes", json::array()))
    compared = compared || n.get<std::string>().rfind("Service proxy: compared table inet weft-services", 0) == 0;
  EXPECT_TRUE(compared) << clean.out;

  // s/web's map element deleted (its ClusterIP no longer DNATs), a stale rule
  // in s/api's service chain. Neither is a table, chain or rule deletion, so
  // weftd's keeper does not wake its own check.
  Nft({"delete", "element", "inet", "weft-services", "service-ips4", "{", std::string(kWebIp) + " . tcp . 80", "}"});
  std::string api_chain;
  for (const auto& ch : api["ports"][0]["chains"])
    if (ch.get<std::string>().rfind("svc4-", 0) == 0) api_chain = ch;
  ASSERT_NE(api_chain, "");
  Nft({"insert", "rule", "inet", "weft-services", api_chain, "drop"});

  CtlRun found = Doctor(false);
  EXPECT_EQ(found.code, 5) << found.out << found.err;  // kExitDiscrepancies
  EXPECT_EQ(ServiceFindings(found), (std::set<std::string>{"Service s/api", "Service s/web"}))
      << found.out << found.err;
  std::string text = Weftctl({"doctor", "--weftd-state-dir", c_->node(0).dir + "/state"}, false).out;
  std::cout << "---- weftctl doctor (n1, broken) ----\n" << text;
  EXPECT_NE(text.find("[services-table] Service s/web: its rules in table inet weft-services are missing or stale"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(std::string("map service-ips4: element missing: ") + kWebIp + " . tcp . 80 : goto svc4-"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("chain " + api_chain + ": rule extra (stale): drop"), std::string::npos) << text;

  CtlRun fixed = Weftctl({"doctor", "--weftd-state-dir", c_->node(0).dir + "/state", "--fix"}, false);
  std::cout << "---- weftctl doctor --fix (n1) ----\n" << fixed.out;
  EXPECT_NE(fixed.out.find("fixed: re-applied weftd's Service ruleset (table inet weft-services) in one nft transaction"),
            std::string::npos)
      << fixed.out << fixed.err;
  const size_t after = fixed.out.find("after --fix:");
  ASSERT_NE(after, std::string::npos) << fixed.out;
  EXPECT_EQ(fixed.out.find("[services-table]", after), std::string::npos) << fixed.out;
  std::string table = Nft({"list", "table", "inet", "weft-services"});
  EXPECT_NE(table.find(std::string(kWebIp) + " . tcp . 80 : goto svc4-"), std::string::npos) << table;
  EXPECT_EQ(ServiceFindings(Doctor(false)), std::set<std::string>{});
}

// weftd without --service-proxy: explain says so (exit 4), doctor skips the
// check with a note.
TEST(ServicesDoctorProxyOff, ExplainRefusesAndDoctorSkipsWithANote) {
  ClusterOptions o;
  o.pods = {"s/client"};
  NetpolCluster c(o);
  ASSERT_EQ(c.error(), "") << c.Diagnostics();
  WeftNode& n = c.node(0);
  auto weftctl = [&](const std::vector<std::string>& args, std::string* out, std::string* err) {
    std::vector<std::string> argv = {"ip", "netns", "exec", n.ns.name(), BinaryPath("weftctl"), "--conf-dir",
                                     n.conf_dir()};
    argv.insert(argv.end(), args.begin(), args.end());
    return Cmd(argv, out, err);
  };
  std::string out, err;
  EXPECT_EQ(weftctl({"service", "explain", "s/web"}, &out, &err), 4) << out << err;
  EXPECT_NE(err.find("does not run the Service proxy (GET /services/explain: 404)"), std::string::npos) << err;
  weftctl({"doctor", "--weftd-state-dir", n.dir + "/state"}, &out, &err);
  std::cout << "---- weftctl doctor (proxy off) ----\n" << out;
  EXPECT_NE(out.find("note: Service proxy check skipped: weftd at 127.0.0.1:9641 runs without the Service proxy (GET "
                     "/services/ruleset: 404), and the kernel has no table inet weft-services"),
            std::string::npos)
      << out << err;
  EXPECT_EQ(out.find("[services-table]"), std::string::npos) << out;
}

}  // namespace
}  // namespace weft::testing::netpol
