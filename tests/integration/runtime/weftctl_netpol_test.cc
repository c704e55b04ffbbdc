// `weftctl policy` and doctor's network policy check against a stand-in
// weftd: a tiny HTTP server inside a test netns serves /netpol,
// /netpol/ruleset and /metrics as weftd renders them (built here by the real
// NetworkPolicy engine), and the netns holds the real nft table. The table
// is then broken by hand; doctor must name each difference, --fix must
// restore it in one transaction, and every error path must say what went
// wrong with the documented exit code.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "e2e/cluster.h"
#include "policy/netpol_model.h"
#include "policy/netpol_types.h"
#include "policy/netpol_testing.h"
#include "sys/netns.h"
#include "sys/nft_json.h"
#include "sys/nft_kernel.h"

namespace weft::testing {
namespace {

using nlohmann::json;
namespace np = policy::netpol;

// Serves <dir>/netpol.json, ruleset.json and metrics.txt on the three
// paths; 404 for a missing file, like weftd without network policy.
constexpr char kServer[] = R"(import http.server, os, sys
root = sys.argv[1]
routes = {"/netpol": "netpol.json", "/netpol/ruleset": "ruleset.json", "/metrics": "metrics.txt"}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        f = routes.get(self.path.split("?")[0])
        p = os.path.join(root, f) if f else None
        body, code = (open(p, "rb").read(), 200) if p and os.path.exists(p) else (b"not found\n", 404)
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 9641), H).serve_forever()
)";

using np::test_util::MakePod;

void Write(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::trunc);
  f << content;
}

class WeftctlNetpolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = TempDir("npctl");
    ::mkdir((root_ + "/conf").c_str(), 0755);
    node_ = std::make_unique<TestNode>("npctl");

    // Node n1 has x/a (dual-stack) and x/b; y/a lives on n2.
    np::Engine e(np::EngineOptions{"n1", np::kDefaultPendingGroup});
    e.UpsertNamespace({"x", {{"ns", "x"}}});
    e.UpsertNamespace({"y", {{"ns", "y"}}});
    e.UpsertPod(
        MakePod("x", "a", {{"pod", "a"}}, "n1", {"10.0.1.1", "fd00::1:1"}, {{"serve-80-tcp", np::Proto::kTcp, 80}}));
    e.UpsertPod(MakePod("x", "b", {{"pod", "b"}}, "n1", {"10.0.1.2"}, {{"serve-80-tcp", np::Proto::kTcp, 81}}));
    e.UpsertPod(MakePod("y", "a", {{"pod", "a"}}, "n2", {"10.0.2.1"}, {{"serve-80-tcp", np::Proto::kTcp, 80}}));
    for (const char* pol : {
             R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
                 "ingress":[{"from":[{"ipBlock":{"cidr":"10.0.0.0/16","except":["10.0.2.0/24"]}}],
                             "ports":[{"port":80,"endPort":81},{"protocol":"UDP"}]}]}})",
             R"({"metadata":{"namespace":"x","name":"eg"},"spec":{"podSelector":{"matchLabels":{"pod":"a"}},
                 "policyTypes":["Egress"],"egress":[{"to":[{"namespaceSelector":{}}],"ports":[{"port":"serve-80-tcp"}]}]}})",
             R"({"metadata":{"namespace":"x","name":"allow-b"},"spec":{"podSelector":{"matchLabels":{"pod":"b"}},
                 "ingress":[{"from":[{"podSelector":{"matchLabels":{"pod":"a"}}}],"ports":[{"port":"serve-80-tcp"}]}]}})"}) {
      auto p = np::DecodePolicy(json::parse(pol));
      ASSERT_TRUE(p.has_value());
      e.UpsertPolicy(*p);
    }
    auto full = e.Full();
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    ruleset_ = sys::nft::TransactionJson(*full);
    // GET /netpol as weftd renders it.
    json pods = json::parse(np::PodPolicyViewsJson(e.LocalPods()));
    ASSERT_EQ(pods.size(), 2u);
    for (const auto& [name, s] : e.desired().sets)
      if (name.ends_with("-b4")) block_set_ = name;
    ASSERT_FALSE(block_set_.empty());
    for (const auto& [ip, chain] : e.desired().ingress4) in_chain_[ip] = chain;
    ASSERT_EQ(in_chain_.size(), 2u);

    Write(root_ + "/netpol.json", pods.dump(2));
    Write(root_ + "/ruleset.json", ruleset_);
    Write(root_ + "/metrics.txt", "weft_netpol_ready 1\n");
    Write(root_ + "/server.py", kServer);
    ApplyRuleset();
    StartServer();
  }

  void TearDown() override {
    server_.reset();
    node_.reset();
    RemoveTree(root_);
  }

  // weftd's table in the node, sent as weftd sends it.
  void ApplyRuleset() {
    auto tx = sys::nft::ParseTransactionJson(ruleset_);
    ASSERT_TRUE(tx.ok()) << tx.status().ToString();
    auto h = sys::Netns::Open(node_->path());
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    Status st = sys::RunInNetns(*h, [&] { return sys::nft::Kernel().Apply(*tx); });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  void StartServer() {
    server_ = std::make_unique<Child>(node_->name(),
                                      std::vector<std::string>{"/usr/bin/python3", root_ + "/server.py", root_},
                                      root_ + "/server.log");
    ASSERT_FALSE(HttpGet(*node_, "http://127.0.0.1:9641/metrics").empty()) << "the stand-in weftd did not start";
  }

  struct Run {
    int code = -1;
    std::string out, err;
    json j;
  };
  Run Weftctl(const std::vector<std::string>& args, bool as_json = false) {
    std::vector<std::string> argv = {"ip",         "netns",        "exec", node_->name(), BinaryPath("weftctl"),
                                     "--conf-dir", root_ + "/conf"};
    if (as_json) argv.push_back("--json");
    argv.insert(argv.end(), args.begin(), args.end());
    Run r;
    r.code = Cmd(argv, &r.out, &r.err);
    if (as_json) {
      try {
        r.j = json::parse(r.out);
      } catch (...) {
        ADD_FAILURE() << "no JSON on stdout: " << r.out << r.err;
      }
    }
    return r;
  }
  Run Doctor(bool as_json, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"doctor", "--data-dir", root_ + "/data"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Weftctl(args, as_json);
  }
  std::string Nft(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"nft"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    EXPECT_EQ(node_->Exec(argv, &out), 0) << out;
    return out;
  }
  static std::vector<json> NetpolFindings(const json& doc) {
    std::vector<json> out;
    for (const auto& f : doc.value("findings", json::array()))
      if (f.value("kind", "") == "netpol-mismatch") out.push_back(f);
    return out;
  }

  std::string root_;
  std::unique_ptr<TestNode> node_;
  std::unique_ptr<Child> server_;
  std::string ruleset_;
  std::string block_set_;
  std::map<std::string, std::string> in_chain_;  // ingress4: address -> chain
};

TEST_F(WeftctlNetpolTest, PolicyShowsWhatWeftdEnforcesPerPod) {
  Run a = Weftctl({"policy", "x/a"});
  std::cerr << "---- weftctl policy x/a ----\n" << a.out << a.err;
  EXPECT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.out.find("pod x/a\n  addresses: 10.0.1.1, fd00::1:1\n  ingress:   isolated by x/p\n"), std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("  egress:    isolated by x/eg\n"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("allow  ip saddr @" + block_set_ + " tcp dport 80-81"), std::string::npos)
      << a.out;
  // The ipBlock set resolved from weftd's ruleset: 10.0.0.0/16 minus
  // 10.0.2.0/24, as nft lists it (a range that is a prefix as the prefix).
  EXPECT_NE(a.out.find("@" + block_set_ + " = { 10.0.0.0/23, 10.0.3.0-10.0.255.255 }"), std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("# x/p ingress 0"), std::string::npos) << a.out;
  EXPECT_EQ(a.out.find("pod x/b"), std::string::npos) << a.out;

  Run all = Weftctl({"policy"});
  std::cerr << "---- weftctl policy ----\n" << all.out << all.err;
  EXPECT_EQ(all.code, 0) << all.err;
  EXPECT_EQ(all.out.rfind("weftd at 127.0.0.1:9641: 2 local pod(s) with an address\n", 0), 0u) << all.out;
  EXPECT_NE(all.out.find("pod x/b\n  addresses: 10.0.1.2\n  ingress:   isolated by x/allow-b\n"), std::string::npos)
      << all.out;
  EXPECT_NE(all.out.find("  egress:    not isolated"), std::string::npos) << all.out;

  Run j = Weftctl({"policy"}, true);
  EXPECT_EQ(j.code, 0);
  ASSERT_EQ(j.j["pods"].size(), 2u) << j.out;
  EXPECT_EQ(j.j["ready"], true);
  EXPECT_EQ(j.j["pods"][0]["pod"], "x/a");
  EXPECT_EQ(j.j["pods"][0]["sets"][block_set_], json::array({"10.0.0.0/23", "10.0.3.0-10.0.255.255"}));

  // Errors: an unknown pod, a bad argument, weftd without network policy,
  // weftd not there.
  Run unknown = Weftctl({"policy", "x/nope"});
  EXPECT_EQ(unknown.code, 3);
  EXPECT_NE(unknown.err.find("pod x/nope is not a local pod weftd knows: weftd at 127.0.0.1:9641 knows 2 local pod(s)"),
            std::string::npos)
      << unknown.err;
  EXPECT_NE(unknown.err.find("(in namespace x: x/a x/b)"), std::string::npos) << unknown.err;
  EXPECT_EQ(Weftctl({"policy", "nope"}).code, 2);
  Run uj = Weftctl({"policy", "x/nope"}, true);
  EXPECT_EQ(uj.j["exitCode"], 3);

  ASSERT_EQ(std::rename((root_ + "/netpol.json").c_str(), (root_ + "/netpol.off").c_str()), 0);
  Run off = Weftctl({"policy"});
  EXPECT_EQ(off.code, 3);
  EXPECT_NE(off.err.find("weftd at 127.0.0.1:9641 does not enforce NetworkPolicy (GET /netpol: 404)"),
            std::string::npos)
      << off.err;

  Run gone = Weftctl({"policy", "--weftd-addr", "127.0.0.1:1"});
  EXPECT_EQ(gone.code, 1);
  EXPECT_NE(gone.err.find("cannot reach weftd at 127.0.0.1:1 (GET /netpol)"), std::string::npos) << gone.err;

  // weftd still starting: shown, with a warning.
  ASSERT_EQ(std::rename((root_ + "/netpol.off").c_str(), (root_ + "/netpol.json").c_str()), 0);
  Write(root_ + "/metrics.txt", "weft_netpol_ready 0\n");
  Run early = Weftctl({"policy", "x/b"});
  EXPECT_EQ(early.code, 0);
  EXPECT_NE(early.err.find("warning: weftd has not yet enforced network policy"), std::string::npos) << early.err;
}

TEST_F(WeftctlNetpolTest, DoctorComparesTheTableWithWeftdsRulesetAndFixesIt) {
  // In step: nothing to report, and a note that the check ran.
  Run clean = Doctor(true);
  EXPECT_EQ(clean.code, 0) << clean.out << clean.err;
  EXPECT_TRUE(NetpolFindings(clean.j).empty()) << clean.j.dump(2);
  EXPECT_NE(clean.j["notes"].dump().find("network policy: compared table inet weft-netpol"), std::string::npos)
      << clean.j.dump(2);

  // Broken by hand: a peer range gone, a rule added, a dispatch entry
  // pointing at another pod's chain. Chain and rule counts stay the same
  // for the chain weftd checks itself, except the added rule.
  const std::string chain_a = in_chain_.at("10.0.1.1"), chain_b = in_chain_.at("10.0.1.2");
  Nft({"delete", "element", "inet", "weft-netpol", block_set_, "{", "10.0.3.0-10.0.255.255", "}"});
  Nft({"add", "rule", "inet", "weft-netpol", chain_a, "ip", "saddr", "192.0.2.99", "accept"});
  Nft({"delete", "element", "inet", "weft-netpol", "ingress4", "{", "10.0.1.2", "}"});
  Nft({"add", "element", "inet", "weft-netpol", "ingress4", "{", "10.0.1.2", ":", "jump", chain_a, "}"});

  Run text = Doctor(false);
  std::cerr << "---- weftctl doctor ----\n" << text.out << text.err;
  EXPECT_EQ(text.code, 5);
  EXPECT_NE(text.out.find("PROBLEM [netpol-mismatch] table inet weft-netpol differs from weftd's ruleset: 1 extra "
                          "rule(s), 1 set element(s) missing, 1 map entry(ies) with another verdict\n"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("        - chain " + chain_a + ": extra rule: ip saddr 192.0.2.99 accept\n"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("        - set " + block_set_ + ": missing element 10.0.3.0-10.0.255.255\n"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("        - map ingress4: 10.0.1.2 : jump " + chain_a + " in the kernel, weftd wants jump " +
                          chain_b + "\n"),
            std::string::npos)
      << text.out;

  Run j = Doctor(true);
  auto fs = NetpolFindings(j.j);
  ASSERT_EQ(fs.size(), 1u) << j.j.dump(2);
  EXPECT_TRUE(fs[0]["fixable"].get<bool>());
  EXPECT_EQ(fs[0]["details"].size(), 3u) << fs[0].dump(2);
  EXPECT_EQ(j.j["findings"].size(), 1u) << j.j.dump(2);

  Run fixed = Doctor(false, {"--fix"});
  std::cerr << "---- weftctl doctor --fix ----\n" << fixed.out << fixed.err;
  EXPECT_EQ(fixed.code, 0) << fixed.out << fixed.err;
  EXPECT_NE(fixed.out.find("fixed: re-applied weftd's NetworkPolicy ruleset (table inet weft-netpol) in one nft "
                           "transaction\nafter --fix: no discrepancies\n"),
            std::string::npos)
      << fixed.out;
  std::string table = Nft({"list", "table", "inet", "weft-netpol"});
  EXPECT_EQ(table.find("192.0.2.99"), std::string::npos) << table;
  EXPECT_NE(table.find("10.0.3.0-10.0.255.255"), std::string::npos) << table;
  EXPECT_NE(table.find("10.0.1.2 : jump " + chain_b), std::string::npos) << table;

  // The whole table gone (nft flush ruleset): an error, fixed the same way.
  Nft({"delete", "table", "inet", "weft-netpol"});
  Run missing = Doctor(true);
  EXPECT_EQ(missing.code, 5);
  fs = NetpolFindings(missing.j);
  ASSERT_EQ(fs.size(), 1u) << missing.j.dump(2);
  EXPECT_NE(
      fs[0]["message"].get<std::string>().find("is missing from the kernel although weftd enforces NetworkPolicy"),
      std::string::npos);
  EXPECT_EQ(Doctor(false, {"--fix"}).code, 0);
  EXPECT_EQ(Doctor(false).code, 0);
}

TEST_F(WeftctlNetpolTest, DoctorWithoutAnAnsweringWeftd) {
  // weftd does not enforce network policy but the table is still there.
  ASSERT_EQ(std::rename((root_ + "/ruleset.json").c_str(), (root_ + "/ruleset.off").c_str()), 0);
  Run left = Doctor(true, {"--fix"});
  EXPECT_EQ(left.code, 5);
  auto fs = NetpolFindings(left.j);
  ASSERT_EQ(fs.size(), 1u) << left.j.dump(2);
  EXPECT_FALSE(fs[0]["fixable"].get<bool>());
  EXPECT_NE(fs[0]["leftBecause"].get<std::string>().find("nft delete table inet weft-netpol"), std::string::npos);
  EXPECT_TRUE(left.j["fixed"].empty()) << left.j.dump(2);
  Nft({"list", "table", "inet", "weft-netpol"});  // --fix left it alone

  // weftd still starting: the check is skipped, not guessed.
  ASSERT_EQ(std::rename((root_ + "/ruleset.off").c_str(), (root_ + "/ruleset.json").c_str()), 0);
  Write(root_ + "/metrics.txt", "weft_netpol_ready 0\n");
  Nft({"delete", "table", "inet", "weft-netpol"});
  Run early = Doctor(true, {"--fix"});
  EXPECT_EQ(early.code, 1) << early.out;
  EXPECT_TRUE(NetpolFindings(early.j).empty());
  EXPECT_NE(early.j["warnings"].dump().find("has not yet enforced network policy"), std::string::npos) << early.out;
  std::string out;
  EXPECT_NE(node_->Exec({"nft", "list", "table", "inet", "weft-netpol"}, &out), 0) << "--fix applied a ruleset anyway";
  Write(root_ + "/metrics.txt", "weft_netpol_ready 1\n");
  ApplyRuleset();

  // weftd down: a warning; exit 1 while the kernel holds a table that could
  // not be compared, 0 once there is none.
  server_.reset();
  Run down = Doctor(false);
  EXPECT_EQ(down.code, 1) << down.out;
  EXPECT_NE(down.out.find("warning: network policy check skipped: cannot reach weftd at 127.0.0.1:9641"),
            std::string::npos)
      << down.out;
  EXPECT_NE(down.out.find("the kernel holds table inet weft-netpol"), std::string::npos) << down.out;
  Nft({"delete", "table", "inet", "weft-netpol"});
  Run none = Doctor(false);
  EXPECT_EQ(none.code, 0) << none.out;
  EXPECT_NE(none.out.find("warning: network policy check skipped"), std::string::npos) << none.out;
  // --weftd-addr "" turns the check off.
  Run skip = Doctor(false, {"--weftd-addr", ""});
  EXPECT_EQ(skip.code, 0);
  EXPECT_NE(skip.out.find("note: network policy check skipped: --weftd-addr is empty"), std::string::npos) << skip.out;
}

}  // namespace
}  // namespace weft::testing
