#include "doctor/policy.h"

#include <gtest/gtest.h>

namespace weft::doctor {
namespace {

// As weftd's GET /netpol renders it (NetpolController::DescribeJson).
const char kNetpol[] = R"([
  {"pod": "x/a", "ips": ["10.0.1.1", "fd00::1:1"], "isolatedIngress": true, "isolatedEgress": false,
   "ingressPolicies": ["x/p"], "egressPolicies": [],
   "ingressRules": ["ct state invalid drop", "ip saddr 10.0.1.1 accept comment \"itself\"",
                    "ip saddr @p0b5187d3f26e-i0-b4 meta l4proto tcp th dport 80-81 accept comment \"x/p ingress 0\"",
                    "counter name \"drop-ingress\" drop"],
   "egressRules": [], "futureKey": 1},
  {"pod": "x/b", "ips": ["10.0.1.2"], "isolatedIngress": false, "isolatedEgress": true,
   "ingressPolicies": [], "egressPolicies": ["x/eg", "x/eg2"],
   "ingressRules": [],
   "egressRules": ["ip daddr . meta l4proto . th dport @p6489cd055f6e-e0-n4 return comment \"x/eg egress 0\"",
                   "accept comment \"x/eg2 egress 0\"", "counter name \"drop-egress\" drop"]}
])";

const char kRuleset[] = R"(add table inet weft-netpol
delete table inet weft-netpol
table inet weft-netpol {
  set p0b5187d3f26e-i0-b4 {
    type ipv4_addr; flags interval;
    elements = { 10.0.0.0-10.0.1.255, 10.0.3.0-10.0.255.255 }
  }
  set p6489cd055f6e-e0-n4 {
    type ipv4_addr . inet_proto . inet_service;
    elements = { 10.0.1.1 . tcp . 80, 10.0.1.2 . tcp . 81, 10.0.2.1 . tcp . 80 }
  }
}
)";

TEST(Policy, ParsesWeftdsAnswer) {
  auto pods = ParsePolicyPods(kNetpol);
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 2u);
  const PolicyPod& a = (*pods)[0];
  EXPECT_EQ(a.pod, "x/a");
  EXPECT_EQ(a.ips, (std::vector<std::string>{"10.0.1.1", "fd00::1:1"}));
  EXPECT_TRUE(a.isolated_ingress);
  EXPECT_FALSE(a.isolated_egress);
  EXPECT_EQ(a.ingress_policies, std::vector<std::string>{"x/p"});
  EXPECT_EQ(a.ingress_rules.size(), 4u);
  EXPECT_EQ(a.raw["futureKey"], 1);  // kept for --json
  EXPECT_EQ((*pods)[1].egress_policies, (std::vector<std::string>{"x/eg", "x/eg2"}));

  EXPECT_TRUE(ParsePolicyPods("[]")->empty());
  EXPECT_EQ(ParsePolicyPods("not json").status().reason(), Reason::kMalformed);
  EXPECT_FALSE(ParsePolicyPods(R"({"pod":"x/a"})").ok());  // not an array
  EXPECT_FALSE(ParsePolicyPods(R"([{"ips":[]}])").ok());   // no pod
}

TEST(Policy, DescribesRulesInPlainWords) {
  RuleLine l = DescribeRule("ip saddr @s meta l4proto tcp th dport 80 accept comment \"x/allow-b ingress 0\"", true);
  EXPECT_EQ(l.verdict, "allow");
  EXPECT_EQ(l.match, "ip saddr @s meta l4proto tcp th dport 80");
  EXPECT_EQ(l.note, "x/allow-b ingress 0");
  // Egress chains "return" to the forward chain when they allow.
  l = DescribeRule("ip daddr 10.0.1.1 return comment \"itself\"", false);
  EXPECT_EQ(l.verdict, "allow");
  EXPECT_EQ(l.match, "ip daddr 10.0.1.1");
  EXPECT_EQ(l.note, "itself");
  l = DescribeRule("counter name \"drop-ingress\" drop", true);
  EXPECT_EQ(l.verdict, "deny");
  EXPECT_EQ(l.match, "");
  EXPECT_EQ(l.note, "counted in drop-ingress");
  l = DescribeRule("goto drop-eg", false);
  EXPECT_EQ(l.verdict, "deny");
  EXPECT_EQ(l.match, "");
  EXPECT_EQ(l.note, "counted in drop-egress, recorded (weftctl policy drops)");
  l = DescribeRule("ip saddr @s goto drop-in comment \"Admin:d ingress 0 Deny\"", true);
  EXPECT_EQ(l.verdict, "deny");
  EXPECT_EQ(l.match, "ip saddr @s");
  EXPECT_EQ(l.note, "Admin:d ingress 0 Deny");
  l = DescribeRule("ct state invalid drop", true);
  EXPECT_EQ(l.verdict, "deny");
  EXPECT_EQ(l.match, "ct state invalid");
  EXPECT_EQ(l.note, "");
  l = DescribeRule("accept comment \"x/all ingress 1\"", true);  // rule {}
  EXPECT_EQ(l.verdict, "allow");
  EXPECT_EQ(l.match, "");
  l = DescribeRule("jump elsewhere", true);  // not one of ours: shown as it is
  EXPECT_EQ(l.verdict, "");
  EXPECT_EQ(l.match, "jump elsewhere");
  // A comment that mentions a verdict is not the verdict.
  l = DescribeRule("tcp dport 22 drop comment \"x/ssh accept\"", true);
  EXPECT_EQ(l.verdict, "deny");
  EXPECT_EQ(l.note, "x/ssh accept");
}

TEST(Policy, FindsTheSetsARuleNames) {
  EXPECT_EQ(RuleSetRefs("ip daddr . meta l4proto . th dport @p1-e0-n4 return"), std::vector<std::string>{"p1-e0-n4"});
  EXPECT_EQ(RuleSetRefs("iifgroup 1 ip saddr != @local4 drop comment \"@notaset\""),
            std::vector<std::string>{"local4"});
  EXPECT_EQ(RuleSetRefs("ip saddr @a ip daddr @b accept"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(RuleSetRefs("ct state invalid drop").empty());
}

TEST(Policy, RendersEachPodPerDirectionWithItsSets) {
  auto pods = ParsePolicyPods(kNetpol);
  ASSERT_TRUE(pods.ok());
  auto rs = ParseNftTable(kRuleset);
  ASSERT_TRUE(rs.ok()) << rs.status().ToString();
  std::string text = RenderPolicyText(*pods, &*rs, 2);
  EXPECT_NE(text.find("pod x/a\n  addresses: 10.0.1.1, fd00::1:1\n  ingress:   isolated by x/p\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("    deny   ct state invalid\n"), std::string::npos) << text;
  EXPECT_NE(text.find("    allow  ip saddr @p0b5187d3f26e-i0-b4 meta l4proto tcp th dport 80-81  # x/p ingress 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("           @p0b5187d3f26e-i0-b4 = { 10.0.0.0-10.0.1.255, 10.0.3.0-10.0.255.255 }\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    deny   everything else"), std::string::npos) << text;
  EXPECT_NE(text.find("# counted in drop-ingress"), std::string::npos) << text;
  EXPECT_NE(text.find("  egress:    not isolated: no policy selects it for egress, all outgoing traffic is allowed\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\npod x/b\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  ingress:   not isolated"), std::string::npos) << text;
  EXPECT_NE(text.find("  egress:    isolated by x/eg, x/eg2\n"), std::string::npos) << text;
  // Three elements, two shown.
  EXPECT_NE(text.find("@p6489cd055f6e-e0-n4 = { 10.0.1.1 . tcp . 80, 10.0.1.2 . tcp . 81 } ... 3 element(s) in all"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    allow  everything"), std::string::npos) << text;
  // Without the ruleset the rules are still there, the sets are not.
  std::string bare = RenderPolicyText(*pods, nullptr);
  EXPECT_NE(bare.find("ip saddr @p0b5187d3f26e-i0-b4"), std::string::npos);
  EXPECT_EQ(bare.find(" = { "), std::string::npos) << bare;
}

// A pod a tier denies its own node: the "to node" part (input hook).
TEST(Policy, RendersTheChainToTheOwnNode) {
  auto pods = ParsePolicyPods(R"([{"pod": "x/a", "ips": ["10.0.1.1"], "isolatedIngress": false, "isolatedEgress": true,
    "ingressPolicies": [], "egressPolicies": ["Admin:no-nodes"], "ingressRules": [],
    "egressRules": ["ct state invalid drop", "ip daddr @b1 goto drop-eg comment \"Admin:no-nodes egress 0 Deny\"",
                    "return comment \"default\""],
    "nodeRules": ["ct state invalid drop", "ip daddr @b1 goto drop-eg comment \"Admin:no-nodes egress 0 Deny\"",
                  "accept comment \"default\""]}])");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  std::string text = RenderPolicyText(*pods, nullptr);
  EXPECT_NE(text.find("  to node:   isolated by Admin:no-nodes\n    deny   ct state invalid\n"
                      "    deny   ip daddr @b1      # Admin:no-nodes egress 0 Deny\n    allow  everything        # default\n"),
            std::string::npos)
      << text;
  // Without a node chain (NetworkPolicy alone, older weftd): no such part.
  auto plain = ParsePolicyPods(kNetpol);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(RenderPolicyText(*plain, nullptr).find("to node"), std::string::npos);
}

TEST(Policy, ReadyMetric) {
  EXPECT_EQ(NetpolReadyMetric("# HELP weft_netpol_ready x\n# TYPE weft_netpol_ready gauge\nweft_netpol_ready 1\n"),
            true);
  EXPECT_EQ(NetpolReadyMetric("weft_netpol_ready_other 1\nweft_netpol_ready 0\n"), false);
  EXPECT_EQ(NetpolReadyMetric("weft_up 1\n"), std::nullopt);
}

}  // namespace
}  // namespace weft::doctor
