#include "doctor/policy_explain.h"

#include <gtest/gtest.h>

namespace weft::doctor {
namespace {

using nlohmann::json;

TEST(PolicyExplain, RendersBothSidesAndTheReason) {
  json e = json::parse(R"J({
    "src": {"pod": "y/a", "ip": "10.0.2.2", "node": "n2"},
    "dst": {"pod": "x/a", "ip": "10.0.1.1", "node": "n1"},
    "family": 4, "protocol": "TCP", "port": 80, "allowed": true, "verdict": "allowed",
    "reason": "admitted by x/allow-y ingress 1 (the source is not isolated for egress)",
    "egress": {"direction": "egress", "pod": "y/a", "judged": true, "isolated": false, "policies": [],
               "admittedBy": [], "allowed": true},
    "ingress": {"direction": "ingress", "pod": "x/a", "judged": true, "isolated": true,
                "policies": ["x/allow-y", "x/deny"],
                "admittedBy": [{"policy": "x/allow-y", "rule": 1, "what": "x/allow-y ingress 1",
                                "ports": "TCP 80-85", "allPorts": false}], "allowed": true}})J");
  EXPECT_EQ(RenderExplanation(e),
            "y/a (10.0.2.2, node n2) -> x/a (10.0.1.1, node n1), IPv4 TCP 80: ALLOWED\n"
            "  egress of y/a:        not isolated: no policy selects it for egress, all outgoing traffic is allowed\n"
            "  ingress of x/a:       isolated by x/allow-y, x/deny\n"
            "                        allowed by x/allow-y ingress 1 (TCP 80-85)\n"
            "  why: admitted by x/allow-y ingress 1 (the source is not isolated for egress)\n");
  e["allowed"] = false;
  e["ingress"]["admittedBy"] = json::array();
  e["src"] = {{"ip", "192.0.2.9"}};
  e["egress"] = {{"direction", "egress"}, {"judged", false}, {"note", "not a pod: no NetworkPolicy applies to 192.0.2.9"}};
  std::string t = RenderExplanation(e);
  EXPECT_NE(t.find("192.0.2.9 (no pod) -> x/a"), std::string::npos) << t;
  EXPECT_NE(t.find(": DENIED\n"), std::string::npos) << t;
  EXPECT_NE(t.find("egress of 192.0.2.9:  not a pod"), std::string::npos) << t;
  EXPECT_NE(t.find("no rule of them admits it"), std::string::npos) << t;
}

TEST(PolicyExplain, NamesTheTierRuleThatDecided) {
  json e = json::parse(R"({
    "src": {"pod": "y/a", "ip": "10.0.2.2"}, "dst": {"pod": "x/a", "ip": "10.0.1.1"},
    "family": 4, "protocol": "TCP", "port": 80, "allowed": false,
    "reason": "the ingress of x/a is denied by Admin:deny-y ingress 0 Deny",
    "egress": {"direction": "egress", "judged": true, "isolated": false, "policies": [], "admittedBy": [],
               "allowed": true},
    "ingress": {"direction": "ingress", "judged": true, "isolated": true, "policies": ["x/all"],
                "admittedBy": [{"what": "x/all ingress 0", "ports": "any port", "allPorts": true}],
                "tierPolicies": ["Admin:deny-y"], "decidedBy": "Admin:deny-y ingress 0 Deny", "allowed": false}})");
  std::string t = RenderExplanation(e);
  EXPECT_NE(t.find("  ingress of x/a:       cluster policies Admin:deny-y\n"
                   "                        decided by Admin:deny-y ingress 0 Deny\n"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("allowed by x/all"), std::string::npos) << t;  // the NetworkPolicy was never reached
  // A Pass hands over to NetworkPolicy, which is then shown.
  e["ingress"]["decidedBy"] = "Admin:pass-y ingress 0 Pass";
  e["allowed"] = true;
  t = RenderExplanation(e);
  EXPECT_NE(t.find("passed on by Admin:pass-y ingress 0 Pass\n                        isolated by x/all\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("allowed by x/all ingress 0 (any port)"), std::string::npos) << t;
}

TEST(PolicyExplain, PercentEncodesQueryValues) {
  EXPECT_EQ(PercentEncode("x/a"), "x%2Fa");
  EXPECT_EQ(PercentEncode("fd00::1"), "fd00%3A%3A1");
  EXPECT_EQ(PercentEncode("80/udp"), "80%2Fudp");
  EXPECT_EQ(PercentEncode("a b&c"), "a%20b%26c");
}

}  // namespace
}  // namespace weft::doctor
