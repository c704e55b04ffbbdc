// The engine's level-triggered property at the benchmark's scale (issue 24
// §2): 10,000 pods in 100 namespaces (110 on the node), 1,000 policies of
// the shapes real clusters use; after a random history of pod, namespace
// and policy events, applied in random batches, the model equals the one
// built from the final objects in one go.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "policy/netpol_model.h"
#include "policy/netpol_testing.h"

namespace weft::policy::netpol {
namespace {

using nlohmann::json;
using test_util::DeltaText;
using test_util::FullText;

constexpr int kNamespaces = 100, kPodsPerNs = 100, kLocal = 110;
const char* const kTiers[] = {"frontend", "backend", "db"};
const char* const kEnvs[] = {"prod", "staging", "dev"};

std::string NsName(int n) { return "ns-" + std::to_string(n); }

Namespace MakeNs(int n, int variant = 0) {
  Labels l = {{"team", "t" + std::to_string((n + variant) % 10)}, {"env", kEnvs[(n + variant) % 3]}};
  if (n < 3) l["role"] = n == 0 ? "monitoring" : n == 1 ? "ingress" : "dns";
  if (variant % 4 == 3) l["team"] = "moved";
  return {NsName(n), l};
}

Pod MakePod(int n, int j, int variant = 0) {
  Pod p;
  p.ns = NsName(n);
  p.name = "app-" + std::to_string(j % 10) + "-" + std::to_string(j);
  p.labels = {{"app", "app-" + std::to_string((j + variant) % 10)}, {"tier", kTiers[(j + variant) % 3]}};
  const int g = n * kPodsPerNs + j;
  // Every 91st pod is local: 110 of them, in most namespaces.
  const bool local = g % 91 == 0 && g / 91 < kLocal;
  p.node = local ? "n1" : "n" + std::to_string(2 + g % 99);
  int host = (g + variant * 7919) % 60000;
  p.ips = {*IpAddress::Parse("10." + std::to_string(local ? 244 : 245 + host / 65536) + "." +
                             std::to_string((host / 256) % 256) + "." + std::to_string(host % 256))};
  if (variant % 5 == 4) p.terminal = true;
  p.ports = {{"http", Proto::kTcp, static_cast<uint16_t>(8080 + (j + variant) % 2)},
             {"metrics", Proto::kTcp, 9090},
             {"grpc", Proto::kTcp, 50051}};
  if (n == 2) p.ports.push_back({"dns", Proto::kUdp, 53});
  return p;
}

// Ten policies of namespace n, as bench/netpol_cluster.cc draws them; a
// variant changes a port and a selector (an update in place).
std::vector<Policy> Policies(int n, int variant = 0) {
  const std::string ns = NsName(n), team = "t" + std::to_string(n % 10);
  auto pol = [&](const std::string& name, json spec) {
    return *DecodePolicy(json{{"metadata", {{"namespace", ns}, {"name", name}}}, {"spec", spec}});
  };
  const int port = 8080 + variant;
  std::vector<Policy> out;
  out.push_back(pol("default-deny", {{"podSelector", json::object()}, {"policyTypes", {"Ingress"}}}));
  out.push_back(pol("allow-frontend", {{"podSelector", {{"matchLabels", {{"tier", "backend"}}}}},
                                       {"ingress", {{{"from", {{{"podSelector", {{"matchLabels", {{"tier", "frontend"}}}}}}}},
                                                     {"ports", {{{"port", port}}}}}}}}));
  out.push_back(pol("allow-team-http", {{"podSelector", json::object()},
                                        {"ingress", {{{"from", {{{"namespaceSelector", {{"matchLabels", {{"team", team}}}}},
                                                                 {"podSelector", {{"matchLabels", {{"tier", "frontend"}}}}}}}},
                                                      {"ports", {{{"port", "http"}}}}}}}}));
  out.push_back(pol("allow-monitoring", {{"podSelector", json::object()},
                                         {"ingress", {{{"from", {{{"namespaceSelector", {{"matchLabels", {{"role", "monitoring"}}}}}}}},
                                                       {"ports", {{{"port", "metrics"}}}}}}}}));
  out.push_back(pol("allow-prod-gateways",
                    {{"podSelector", {{"matchLabels", {{"tier", "frontend"}}}}},
                     {"ingress", {{{"from", {{{"namespaceSelector", {{"matchLabels", {{"env", "prod"}}}}},
                                              {"podSelector", {{"matchLabels", {{"app", "app-1"}}}}}},
                                             {{"podSelector", {{"matchLabels", {{"app", "app-" + std::to_string(variant % 10)}}}}}}}}}}}}));
  out.push_back(pol("allow-external", {{"podSelector", {{"matchLabels", {{"tier", "frontend"}}}}},
                                       {"ingress", {{{"from", {{{"ipBlock", {{"cidr", "0.0.0.0/0"},
                                                                             {"except", {"10.0.0.0/8", "192.168.0.0/16"}}}}}}},
                                                     {"ports", {{{"port", 443}}}}}}}}));
  out.push_back(pol("allow-expr", {{"podSelector", {{"matchExpressions", {{{"key", "tier"}, {"operator", "In"}, {"values", {"db", "backend"}}}}}}},
                                   {"ingress", {{{"from", {{{"podSelector", {{"matchExpressions", {{{"key", "app"}, {"operator", "NotIn"},
                                                                                                    {"values", {"app-0", "app-" + std::to_string(1 + variant % 9)}}}}}}}}}},
                                                 {"ports", {{{"protocol", "UDP"}, {"port", 5000}, {"endPort", 5100 + variant}}}}}}}}));
  out.push_back(pol("allow-env-ns", {{"podSelector", {{"matchLabels", {{"tier", "db"}}}}},
                                     {"ingress", {{{"from", {{{"namespaceSelector", {{"matchExpressions", {{{"key", "env"}, {"operator", "In"},
                                                                                                            {"values", {"prod", "staging"}}}}}}}}}}}}}}));
  out.push_back(pol("egress-dns-and-own", {{"podSelector", json::object()}, {"policyTypes", {"Egress"}},
                                           {"egress", {{{"to", {{{"namespaceSelector", {{"matchLabels", {{"role", "dns"}}}}}}}},
                                                        {"ports", {{{"protocol", "UDP"}, {"port", "dns"}}}}},
                                                       {{"to", {{{"podSelector", json::object()}}}}}}}}));
  out.push_back(pol("egress-named", {{"podSelector", {{"matchLabels", {{"tier", "frontend"}}}}}, {"policyTypes", {"Egress"}},
                                     {"egress", {{{"to", {{{"namespaceSelector", {{"matchLabels", {{"team", team}}}}}}}},
                                                  {"ports", {{{"port", "grpc"}}, {{"port", "http"}}}}}}}}));
  return out;
}

TEST(NetpolEngineScale, AnyEventHistoryEqualsFromScratchAt10000Pods) {
  std::mt19937 rng(24);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  Engine inc(EngineOptions{"n1"});
  inc.BeginBatch();
  for (int n = 0; n < kNamespaces; ++n) inc.UpsertNamespace(MakeNs(n));
  for (int n = 0; n < kNamespaces; ++n)
    for (int j = 0; j < kPodsPerNs; ++j) inc.UpsertPod(MakePod(n, j));
  for (int n = 0; n < kNamespaces; ++n)
    for (const auto& p : Policies(n)) inc.UpsertPolicy(p);
  inc.EndBatch();
  ASSERT_EQ(inc.pod_count(), static_cast<size_t>(kNamespaces * kPodsPerNs));
  ASSERT_EQ(inc.policy_count(), static_cast<size_t>(kNamespaces * 10));
  ASSERT_GE(inc.desired().chains.size(), 200u);  // the local pods' chains exist
  inc.MarkApplied(true);

  // 1,500 events in batches of 1-20, each batch "applied" (Tightened,
  // Delta, MarkApplied as the controller does).
  int events = 0;
  while (events < 1500) {
    inc.BeginBatch();
    for (int b = 1 + pick(20); b > 0; --b, ++events) {
      const int n = pick(kNamespaces), j = pick(kPodsPerNs);
      switch (pick(8)) {
        case 0: case 1: inc.UpsertPod(MakePod(n, j, 1 + pick(6))); break;  // relabel, move, terminal
        case 2: inc.RemovePod(MakePod(n, j).key()); break;
        case 3: inc.UpsertNamespace(MakeNs(n, pick(4))); break;
        case 4: inc.RemoveNamespace(NsName(n)); break;
        case 5: {
          auto pols = Policies(n, pick(3));
          inc.UpsertPolicy(pols[static_cast<size_t>(pick(10))]);
          break;
        }
        case 6: inc.RemovePolicy(NsName(n) + "/" + Policies(n)[static_cast<size_t>(pick(10))].name); break;
        case 7: inc.UpsertPod(MakePod(n, j)); break;
      }
    }
    inc.EndBatch();
    (void)inc.Tightened();
    (void)DeltaText(inc);
    inc.MarkApplied(false);
  }
  // Everything back as first written.
  inc.BeginBatch();
  for (int n = 0; n < kNamespaces; ++n) inc.UpsertNamespace(MakeNs(n));
  for (int n = 0; n < kNamespaces; ++n)
    for (int j = 0; j < kPodsPerNs; ++j) inc.UpsertPod(MakePod(n, j));
  for (int n = 0; n < kNamespaces; ++n)
    for (const auto& p : Policies(n)) inc.UpsertPolicy(p);
  inc.EndBatch();

  Engine fresh(EngineOptions{"n1"});
  fresh.BeginBatch();
  for (int n = 0; n < kNamespaces; ++n) fresh.UpsertNamespace(MakeNs(n));
  for (int n = 0; n < kNamespaces; ++n)
    for (int j = 0; j < kPodsPerNs; ++j) fresh.UpsertPod(MakePod(n, j));
  for (int n = 0; n < kNamespaces; ++n)
    for (const auto& p : Policies(n)) fresh.UpsertPolicy(p);
  fresh.EndBatch();
  ASSERT_TRUE(inc.desired() == fresh.desired());  // (not EXPECT_EQ: printing two 55,000-element models)
  EXPECT_EQ(FullText(inc), FullText(fresh));
  EXPECT_EQ(inc.NamespacesWithPolicies(), fresh.NamespacesWithPolicies());
  // And the delta from the history's last applied state reaches it: once
  // marked applied, nothing is left to send.
  inc.MarkApplied(false);
  EXPECT_EQ(DeltaText(inc), "");
}

}  // namespace
}  // namespace weft::policy::netpol
