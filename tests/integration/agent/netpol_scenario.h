#pragma once
// A NetworkPolicy scenario for the netpol table's equivalence test
// (netpol_nft_equivalence_test.cc): every kind of object the table has
// (pod, named-port and ipBlock sets of both families, per-pod chains with
// their reply twins, Admin Pass tails, shared node chains, the dispatch
// maps), then events that touch each kind incrementally. Step 0 is the
// start (one full table); each later step is one delta.
//
// testdata/netpol/step<N>.nft is what the text path (the engine's
// RenderFull/RenderDelta at b8f2d4c, the commit before the switch to the
// layer) wrote for each step: made once by netpol_golden_main.cc at that
// commit and kept as a fixture, not product code.

#include <nlohmann/json.hpp>

#include <string>

#include "policy/cnp_types.h"
#include "policy/netpol_model.h"
#include "policy/netpol_testing.h"

namespace weft::testing::netpol_scenario {

using namespace policy::netpol;
using test_util::MakePod;

inline constexpr int kSteps = 9;
inline constexpr char kNode[] = "n1";

inline Policy Np(const std::string& text) { return *DecodePolicy(nlohmann::json::parse(text)); }
inline ClusterPolicy Cnp(const std::string& text) { return *DecodeClusterPolicy(nlohmann::json::parse(text)); }
inline NodeInfo Node(const std::string& name, Labels labels, std::vector<std::string> ips) {
  NodeInfo n;
  n.name = name;
  n.labels = std::move(labels);
  for (const auto& s : ips) n.ips.push_back(*IpAddress::Parse(s));
  return n;
}

inline void Step(Engine& e, int step) {
  switch (step) {
    case 0:
      e.BeginBatch();
      e.UpsertNamespace({"x", {{"ns", "x"}}});
      e.UpsertNamespace({"y", {{"ns", "y"}}});
      e.UpsertNode(Node("n1", {{"role", "w"}}, {"192.168.0.1", "fd00:ff::1"}));
      e.UpsertNode(Node("n2", {{"role", "w"}}, {"192.168.0.2"}));
      e.UpsertPod(MakePod("x", "a", {{"app", "db"}}, "n1", {"10.0.1.1", "fd00::11"}, {{"serve", Proto::kTcp, 5432}}));
      e.UpsertPod(MakePod("x", "w", {{"app", "web"}}, "n1", "10.0.1.3", {{"serve", Proto::kTcp, 80}}));
      e.UpsertPod(MakePod("x", "b", {{"app", "web"}}, "n2", "10.0.1.2", {{"serve", Proto::kTcp, 8080}}));
      e.UpsertPod(MakePod("y", "c", {{"app", "web"}}, "n2", "10.0.2.1", {{"serve", Proto::kUdp, 53}}));
      e.UpsertPod(MakePod("y", "d", {{"app", "db"}}, "n2", "fd00::21", {{"serve", Proto::kSctp, 7}}));
      e.UpsertPolicy(Np(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{"matchLabels":{"app":"db"}},
        "policyTypes":["Ingress","Egress"],
        "ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"web"}}},
                            {"namespaceSelector":{"matchLabels":{"ns":"y"}},"podSelector":{"matchLabels":{"app":"web"}}}],
                    "ports":[{"port":5432},{"port":"serve"},{"port":6000,"endPort":6010,"protocol":"UDP"}]},
                   {"from":[{"ipBlock":{"cidr":"172.16.0.0/12","except":["172.16.5.0/24"]}},
                            {"ipBlock":{"cidr":"fd00:aa::/32"}}]}],
        "egress":[{"to":[{"namespaceSelector":{}}],"ports":[{"port":"serve"},{"port":"serve","protocol":"UDP"},
                                                          {"port":"serve","protocol":"SCTP"}]},
                  {"ports":[{"port":53,"protocol":"UDP"},{"protocol":"TCP"}]}]}})"));
      e.UpsertPolicy(Np(R"({"metadata":{"namespace":"x","name":"deny-in"},"spec":{"podSelector":{"matchLabels":{"app":"web"}},
        "policyTypes":["Ingress"]}})"));
      e.UpsertClusterPolicy(Cnp(R"({"metadata":{"name":"admin","generation":1},"spec":{"tier":"Admin","priority":5,
        "subject":{"namespaces":{"matchLabels":{"ns":"x"}}},
        "ingress":[{"action":"Deny","from":[{"pods":{"namespaceSelector":{"matchLabels":{"ns":"y"}},"podSelector":{"matchLabels":{"app":"db"}}}}]},
                   {"action":"Pass","from":[{"namespaces":{"matchLabels":{"ns":"y"}}}]}],
        "egress":[{"action":"Accept","to":[{"nodes":{"matchLabels":{"role":"w"}}}],"protocols":[{"tcp":{"destinationPort":{"number":10250}}}]},
                  {"action":"Deny","to":[{"networks":["10.99.0.0/16","fd00:99::/64"]}]},
                  {"action":"Pass","to":[{"pods":{"namespaceSelector":{},"podSelector":{"matchLabels":{"app":"web"}}}}]}]}})"));
      e.UpsertClusterPolicy(Cnp(R"({"metadata":{"name":"base","generation":1},"spec":{"tier":"Baseline","priority":10,
        "subject":{"namespaces":{}},
        "egress":[{"action":"Deny","to":[{"networks":["169.254.169.254/32"]}],"protocols":[{"udp":{"destinationPort":{"range":{"start":100,"end":200}}}}]}]}})"));
      e.EndBatch();
      break;
    case 1:  // a remote pod relabelled out of the peers (elements only)
      e.UpsertPod(MakePod("x", "b", {{"app", "batch"}}, "n2", "10.0.1.2", {{"serve", Proto::kTcp, 8080}}));
      break;
    case 2:  // a remote pod readdressed with a new named port
      e.UpsertPod(MakePod("y", "c", {{"app", "web"}}, "n2", "10.0.2.7", {{"serve", Proto::kUdp, 5353}}));
      break;
    case 3:  // a new local pod (chains, dispatch entries, local set)
      e.UpsertPod(MakePod("x", "e", {{"app", "db"}}, "n1", {"10.0.1.5", "fd00::15"}, {{"serve", Proto::kTcp, 5433}}));
      break;
    case 4:  // a policy changed: its chains rewritten, an ipBlock set replaced
      e.UpsertPolicy(Np(R"({"metadata":{"namespace":"x","name":"p"},"spec":{"podSelector":{"matchLabels":{"app":"db"}},
        "policyTypes":["Ingress"],
        "ingress":[{"from":[{"ipBlock":{"cidr":"10.128.0.0/9","except":["10.200.0.0/16","10.201.0.0/16"]}}]}]}})"));
      break;
    case 5:  // a namespace relabelled
      e.UpsertNamespace({"y", {{"ns", "y2"}}});
      break;
    case 6:  // a node's addresses changed (the nodes peer's interval set)
      e.UpsertNode(Node("n2", {{"role", "w"}}, {"192.168.0.2", "192.168.0.3"}));
      break;
    case 7:  // the Admin policy gone: tails and node chains go
      e.RemoveClusterPolicy("admin");
      break;
    case 8:  // local pods gone, the last IPv6 pod address gone too
      e.RemovePod("x/a");
      e.RemovePod("x/e");
      e.RemovePod("y/d");
      break;
  }
}

}  // namespace weft::testing::netpol_scenario
