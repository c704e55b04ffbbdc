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

TEST(PolicyExplain, PercentEncodesQueryValues) {
  EXPECT_EQ(PercentEncode("x/a"), "x%2Fa");
  EXPECT_EQ(PercentEncode("fd00::1"), "fd00%3A%3A1");
  EXPECT_EQ(PercentEncode("80/udp"), "80%2Fudp");
  EXPECT_EQ(PercentEncode("a b&c"), "a%20b%26c");
}

}  // namespace
}  // namespace weft::doctor
