#include "bench/netpol_cluster.h"

#include <cstdio>
#include <random>
#include <set>

namespace weft::bench::netpol {

using nlohmann::json;

namespace {

const char* const kTiers[] = {"frontend", "backend", "db"};
const char* const kEnvs[] = {"prod", "staging", "dev"};

std::string Uid(uint32_t a, uint64_t b) {
  char s[48];
  std::snprintf(s, sizeof s, "%08x-0000-4000-8000-%012llx", a, static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return s;
}

// `digits` hex digits derived from `v` (splitmix64, so different values
// give different strings): the random-looking parts of generated names.
std::string Hex(uint64_t v, int digits) {
  std::string out;
  uint64_t x = v;
  for (int i = 0; i < digits; i += 16) {
    x += 0x9e3779b97f4a7c15ULL;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    for (int k = 0; k < 16 && i + k < digits; ++k) out += "0123456789abcdef"[(z >> (4 * k)) & 15];
  }
  return out;
}

json Sel(const json& labels) { return {{"matchLabels", labels}}; }

json Np(int n, const std::string& name, json spec) {
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata", {{"name", name}, {"namespace", NamespaceName(n)}}},
          {"spec", std::move(spec)}};
}

json Tcp(const json& port) { return {{"protocol", "TCP"}, {"port", port}}; }
json Udp(const json& port) { return {{"protocol", "UDP"}, {"port", port}}; }

}  // namespace

std::string NamespaceName(int n) {
  char s[16];
  std::snprintf(s, sizeof s, "ns-%03d", n);
  return s;
}

json NamespaceLabels(int n) {
  json l = {{"team", "t" + std::to_string(n % 10)}, {"env", kEnvs[n % 3]}};
  if (n == 0) l["role"] = "monitoring";
  if (n == 1) l["role"] = "ingress";
  if (n == 2) l["role"] = "dns";
  return l;
}

json PodLabels(const BenchPod& p) {
  return {
      {"app", p.app}, {"tier", p.tier}, {"pod-template-hash", Hex(static_cast<uint64_t>(p.ns) * 10 + p.j % 10, 10)}};
}

json ContainerPorts(int n, int j) {
  json ports = {{{"name", "http"}, {"containerPort", 8080 + j % 2}, {"protocol", "TCP"}},
                {{"name", "metrics"}, {"containerPort", 9090}, {"protocol", "TCP"}},
                {{"name", "grpc"}, {"containerPort", 50051}, {"protocol", "TCP"}}};
  if (n == 2) {
    ports.push_back({{"name", "dns"}, {"containerPort", 53}, {"protocol", "UDP"}});
    ports.push_back({{"name", "dns-tcp"}, {"containerPort", 53}, {"protocol", "TCP"}});
  }
  return ports;
}

std::string NextTier(const std::string& tier) {
  for (int i = 0; i < 3; ++i)
    if (tier == kTiers[i]) return kTiers[(i + 1) % 3];
  return kTiers[0];
}

std::vector<json> Policies(int n, int count) {
  (void)count;
  std::vector<json> out;
  // 1. Deny all ingress in the namespace (policyTypes left to the server's defaulting).
  out.push_back(Np(n, "default-deny-ingress", {{"podSelector", json::object()}}));
  // 2. Same namespace, pod selector peer, numeric port.
  out.push_back(
      Np(n, "allow-frontend-to-backend",
         {{"podSelector", Sel({{"tier", "backend"}})},
          {"ingress", {{{"from", {{{"podSelector", Sel({{"tier", "frontend"}})}}}}, {"ports", {Tcp(8080)}}}}}}));
  // 3. Namespace AND pod selector in one peer, named port (protocol defaulted).
  out.push_back(
      Np(n, "allow-ingress-controller",
         {{"podSelector", Sel({{"tier", "frontend"}})},
          {"ingress",
           {{{"from", {{{"namespaceSelector", Sel({{"role", "ingress"}})}, {"podSelector", Sel({{"app", "app-0"}})}}}},
             {"ports", {{{"port", "http"}}}}}}}}));
  // 4. Namespace selector peer (a whole namespace), named port, every pod.
  out.push_back(
      Np(n, "allow-monitoring",
         {{"podSelector", json::object()},
          {"ingress",
           {{{"from", {{{"namespaceSelector", Sel({{"role", "monitoring"}})}}}}, {"ports", {Tcp("metrics")}}}}}}));
  // 5. Two peers (OR): same namespace, and the team's namespaces AND backend.
  out.push_back(Np(n, "allow-backend-to-db",
                   {{"podSelector", Sel({{"tier", "db"}})},
                    {"ingress",
                     {{{"from",
                        {{{"podSelector", Sel({{"tier", "backend"}})}},
                         {{"namespaceSelector", Sel({{"team", "t" + std::to_string(n % 10)}})},
                          {"podSelector", Sel({{"tier", "backend"}})}}}},
                       {"ports", {Tcp(5432)}}}}}}));
  // 6. ipBlocks with excepts.
  out.push_back(
      Np(n, "allow-external-https",
         {{"podSelector", Sel({{"tier", "frontend"}})},
          {"ingress",
           {{{"from",
              {{{"ipBlock", {{"cidr", "0.0.0.0/0"}, {"except", {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}}}}},
               {{"ipBlock", {{"cidr", "10.10.0.0/16"}, {"except", {"10.10." + std::to_string(n % 256) + ".0/24"}}}}}}},
             {"ports", {Tcp(443), Tcp(8443)}}}}}}));
  // 7. matchExpressions (In, NotIn), a port range and UDP.
  out.push_back(
      Np(n, "allow-app-peers",
         {{"podSelector", Sel({{"app", "app-" + std::to_string(n % 10)}})},
          {"ingress",
           {{{"from",
              {{{"podSelector",
                 {{"matchExpressions",
                   {{{"key", "app"},
                     {"operator", "In"},
                     {"values", {"app-" + std::to_string((n + 1) % 10), "app-" + std::to_string((n + 2) % 10)}}},
                    {{"key", "tier"}, {"operator", "NotIn"}, {"values", {"db"}}}}}}}}}},
             {"ports", {{{"protocol", "TCP"}, {"port", 8000}, {"endPort", 8100}}, Udp(8125)}}}}}}));
  // 8. Namespace selector by expression AND pod selector, any port.
  out.push_back(Np(n, "allow-prod-gateways",
                   {{"podSelector", Sel({{"tier", "frontend"}})},
                    {"ingress",
                     {{{"from",
                        {{{"namespaceSelector",
                           {{"matchExpressions", {{{"key", "env"}, {"operator", "In"}, {"values", {"prod"}}}}}}},
                          {"podSelector", Sel({{"app", "app-1"}})}}}}}}}}));
  // 9. Egress for every pod: DNS and the own namespace (even), or all but the metadata address (odd).
  if (n % 2 == 0)
    out.push_back(Np(n, "egress-dns-and-same-ns",
                     {{"podSelector", json::object()},
                      {"policyTypes", {"Egress"}},
                      {"egress",
                       {{{"to", {{{"namespaceSelector", Sel({{"role", "dns"}})}}}}, {"ports", {Udp(53), Tcp(53)}}},
                        {{"to", {{{"podSelector", json::object()}}}}}}}}));
  else
    out.push_back(
        Np(n, "deny-egress-to-metadata",
           {{"podSelector", json::object()},
            {"policyTypes", {"Egress"}},
            {"egress", {{{"to", {{{"ipBlock", {{"cidr", "0.0.0.0/0"}, {"except", {"169.254.169.254/32"}}}}}}}}}}}));
  // 10. Egress with named ports (resolved on each peer pod).
  out.push_back(
      Np(n, "egress-frontend-named-ports",
         {{"podSelector", Sel({{"tier", "frontend"}})},
          {"policyTypes", {"Egress"}},
          {"egress",
           {{{"to", {{{"podSelector", Sel({{"tier", "backend"}})}}}}, {"ports", {Tcp("http"), Tcp("grpc")}}},
            {{"to", {{{"namespaceSelector", Sel({{"role", "dns"}})}}}}, {"ports", {Udp("dns"), Tcp("dns-tcp")}}}}}}));
  return out;
}

json Cluster::PodObject(const BenchPod& p) const {
  const uint64_t id = static_cast<uint64_t>(p.ns) * 100000 + static_cast<uint64_t>(p.j);
  const std::string rs = p.app + "-" + Hex(static_cast<uint64_t>(p.ns) * 10 + p.j % 10, 10);
  const std::string vol = "kube-api-access-" + Hex(id, 5);
  const std::string host_ip = p.local ? "192.0.2.11" : FakeNodeHostIp(std::stoi(p.node.substr(p.node.rfind('-') + 1)));
  const std::string ts = "2026-01-01T00:00:00Z";
  json c = {{"name", "app"},
            {"image", "registry.example/" + p.app + ":v1.2." + std::to_string(p.j % 7)},
            {"ports", ContainerPorts(p.ns, p.j)},
            {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "128Mi"}}}, {"limits", {{"memory", "256Mi"}}}}},
            {"volumeMounts",
             {{{"name", vol}, {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"}, {"readOnly", true}}}},
            {"terminationMessagePath", "/dev/termination-log"},
            {"terminationMessagePolicy", "File"},
            {"imagePullPolicy", "IfNotPresent"}};
  json spec = {
      {"nodeName", p.node},
      {"containers", {c}},
      {"restartPolicy", "Always"},
      {"terminationGracePeriodSeconds", 30},
      {"dnsPolicy", "ClusterFirst"},
      {"serviceAccountName", "default"},
      {"serviceAccount", "default"},
      {"securityContext", json::object()},
      {"schedulerName", "default-scheduler"},
      {"tolerations",
       {{{"key", "node.kubernetes.io/not-ready"},
         {"operator", "Exists"},
         {"effect", "NoExecute"},
         {"tolerationSeconds", 300}},
        {{"key", "node.kubernetes.io/unreachable"},
         {"operator", "Exists"},
         {"effect", "NoExecute"},
         {"tolerationSeconds", 300}}}},
      {"priority", 0},
      {"enableServiceLinks", true},
      {"preemptionPolicy", "PreemptLowerPriority"},
      {"volumes",
       {{{"name", vol},
         {"projected",
          {{"sources",
            {{{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}},
             {{"configMap", {{"name", "kube-root-ca.crt"}, {"items", {{{"key", "ca.crt"}, {"path", "ca.crt"}}}}}}},
             {{"downwardAPI",
               {{"items",
                 {{{"path", "namespace"},
                   {"fieldRef", {{"apiVersion", "v1"}, {"fieldPath", "metadata.namespace"}}}}}}}}}}},
           {"defaultMode", 420}}}}}}};
  json conditions = json::array();
  for (const char* t : {"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"})
    conditions.push_back({{"type", t}, {"status", "True"}, {"lastProbeTime", nullptr}, {"lastTransitionTime", ts}});
  json status = {{"phase", "Running"},
                 {"conditions", conditions},
                 {"hostIP", host_ip},
                 {"hostIPs", {{{"ip", host_ip}}}},
                 {"podIP", p.ip},
                 {"podIPs", {{{"ip", p.ip}}}},
                 {"startTime", ts},
                 {"containerStatuses",
                  {{{"name", "app"},
                    {"state", {{"running", {{"startedAt", ts}}}}},
                    {"lastState", json::object()},
                    {"ready", true},
                    {"restartCount", 0},
                    {"image", "registry.example/" + p.app + ":v1.2." + std::to_string(p.j % 7)},
                    {"imageID", "registry.example/" + p.app + "@sha256:" + Hex(id * 7, 64)},
                    {"containerID", "containerd://" + Hex(id * 13, 64)},
                    {"started", true}}}},
                 {"qosClass", "Burstable"}};
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", p.name},
            {"generateName", rs + "-"},
            {"namespace", p.namespace_name},
            {"uid", Uid(static_cast<uint32_t>(p.ns), id)},
            {"creationTimestamp", ts},
            {"labels", PodLabels(p)},
            {"ownerReferences",
             {{{"apiVersion", "apps/v1"},
               {"kind", "ReplicaSet"},
               {"name", rs},
               {"uid", Uid(0xabc, id / 10)},
               {"controller", true},
               {"blockOwnerDeletion", true}}}}}},
          {"spec", spec},
          {"status", status}};
}

std::string FakeNodePrefix(int f, const Scale& s) {
  if (s.fake_nodes <= kNarrowMaxNodes) return "10.244." + std::to_string(f) + ".";
  return "10." + std::to_string(240 + f / 256) + "." + std::to_string(f % 256) + ".";
}

std::string FakeNodeHostIp(int f) { return "198.18." + std::to_string(f / 256) + "." + std::to_string(f % 256); }

Cluster MakeCluster(const Scale& s) {
  Cluster c;
  c.scale = s;
  for (int n = 0; n < s.namespaces; ++n)
    c.namespaces.push_back({{"apiVersion", "v1"},
                            {"kind", "Namespace"},
                            {"metadata", {{"name", NamespaceName(n)}, {"labels", NamespaceLabels(n)}}}});
  // The measured node, then the fake ones (routes and FDB entries in weftd,
  // as in a real cluster of that many nodes).
  c.nodes.push_back({{"apiVersion", "v1"},
                     {"kind", "Node"},
                     {"metadata", {{"name", kNode}}},
                     {"spec", {{"podCIDR", kNodeCidr}, {"podCIDRs", {kNodeCidr}}}},
                     {"status", {{"addresses", {{{"type", "InternalIP"}, {"address", "192.0.2.11"}}}}}}});
  for (int f = 1; f <= s.fake_nodes; ++f) {
    const std::string cidr = FakeNodePrefix(f, s) + "0/24";
    const std::string ip = FakeNodeHostIp(f);
    char mac[32];
    std::snprintf(mac, sizeof mac, "0a:02:00:00:%02x:%02x", (f >> 8) & 0xff, f & 0xff);
    char name[16];
    std::snprintf(name, sizeof name, "node-%d", f);
    c.nodes.push_back(
        {{"apiVersion", "v1"},
         {"kind", "Node"},
         {"metadata",
          {{"name", name},
           {"annotations", {{"weft.io/vtep-mac", mac}, {"weft.io/host-ip", ip}, {"weft.io/backend", "vxlan"}}}}},
         {"spec", {{"podCIDR", cidr}, {"podCIDRs", {cidr}}}},
         {"status", {{"addresses", {{{"type", "InternalIP"}, {"address", ip}}}}}}});
  }
  const int total = s.total_pods();
  c.pods.resize(static_cast<size_t>(total));
  std::set<std::string> names;
  for (int g = 0; g < total; ++g) {
    BenchPod& p = c.pods[static_cast<size_t>(g)];
    p.ns = g % s.namespaces;
    p.j = g / s.namespaces;
    p.namespace_name = NamespaceName(p.ns);
    p.app = "app-" + std::to_string(p.j % 10);
    p.tier = kTiers[p.j % 3];
    p.name =
        p.app + "-" + Hex(static_cast<uint64_t>(p.ns) * 10 + p.j % 10, 10) + "-" + Hex(static_cast<uint64_t>(g), 5);
    while (!names.insert(p.namespace_name + "/" + p.name).second) p.name += "x";  // a rare clash of the random part
  }
  // A fixed draw of the local pods (mt19937 is specified by the standard,
  // and the shuffle is ours, so every build draws the same).
  std::vector<size_t> order(static_cast<size_t>(total));
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937 rng(20261122);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  const int fake = s.fake_nodes > 0 ? s.fake_nodes : 1;
  for (size_t k = 0; k < order.size(); ++k) {
    BenchPod& p = c.pods[order[k]];
    if (static_cast<int>(k) < s.local_pods) {
      p.local = true;
      p.node = kNode;
      p.ip = "10.244.0." + std::to_string(128 + k);
      c.local.push_back(order[k]);
    } else {
      const size_t r = k - static_cast<size_t>(s.local_pods);
      const int f = static_cast<int>(r % static_cast<size_t>(fake)) + 1;
      p.node = "node-" + std::to_string(f);
      p.ip = FakeNodePrefix(f, s) + std::to_string(2 + r / static_cast<size_t>(fake));
      c.remote.push_back(order[k]);
    }
  }
  for (int n = 0; n < s.namespaces; ++n)
    for (auto& p : Policies(n, s.namespaces)) c.policies.push_back(std::move(p));
  return c;
}

std::vector<json> ClusterPolicies(int count, int namespaces) {
  std::vector<json> out;
  for (int i = 0; i < count; ++i) {
    const bool admin = i % 2 == 0;
    const std::string team = "t" + std::to_string(i % 10);
    json subject = i % 3 == 0
                       ? json::parse(R"({"namespaces": {"matchLabels": {"team": ")" + team + R"("}}})")
                       : json::parse(R"({"pods": {"namespaceSelector": {"matchLabels": {"team": ")" + team +
                                     R"("}}, "podSelector": {"matchLabels": {"tier": ")" + kTiers[i % 3] + R"("}}}})");
    json ingress = json::array(), egress = json::array();
    switch (i % 5) {
      case 0:  // tenant isolation: monitoring passes, other teams are denied
        ingress = json::parse(R"([
          {"name": "monitoring", "action": "Pass", "from": [{"namespaces": {"matchLabels": {"role": "monitoring"}}}]},
          {"name": "other-teams", "action": "Deny",
           "from": [{"namespaces": {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": [")" +
                              team + R"("]}]}}]}])");
        break;
      case 1:  // the metadata address, and node access on the kubelet port
        egress = json::parse(R"([
          {"name": "metadata", "action": "Deny", "to": [{"networks": ["169.254.169.254/32", "fd00:ec2::254/128"]}]},
          {"name": "kubelet", "action": "Deny", "to": [{"nodes": {}}],
           "protocols": [{"tcp": {"destinationPort": {"number": 10250}}}]}])");
        break;
      case 2:  // DNS by named port, metrics from monitoring
        egress = json::parse(R"([{"name": "dns", "action": "Accept",
          "to": [{"namespaces": {"matchLabels": {"role": "dns"}}}], "protocols": [{"destinationNamedPort": "dns"}]}])");
        ingress = json::parse(R"([{"name": "metrics", "action": "Accept",
          "from": [{"namespaces": {"matchLabels": {"role": "monitoring"}}}],
          "protocols": [{"destinationNamedPort": "metrics"}]}])");
        break;
      case 3:  // an environment boundary on a port range
        ingress = json::parse(std::string(R"([{"name": "env", "action": "Deny",
          "from": [{"namespaces": {"matchLabels": {"env": ")") + kEnvs[(i / 5) % 3] + R"("}}}],
          "protocols": [{"tcp": {"destinationPort": {"range": {"start": 30000, "end": 32767}}}}]}])");
        break;
      default:  // pods of one app of another team, UDP
        ingress = json::parse(std::string(R"([{"name": "app", "action": ")") + (admin ? "Pass" : "Accept") +
                              R"(", "from": [{"pods": {"namespaceSelector": {"matchLabels": {"team": "t)" +
                              std::to_string((i + 1) % 10) + R"("}}, "podSelector": {"matchLabels": {"app": "app-)" +
                              std::to_string(i % 10) + R"("}}}}],
          "protocols": [{"udp": {"destinationPort": {"number": 53}}}]}])");
        break;
    }
    json spec = {{"tier", admin ? "Admin" : "Baseline"}, {"priority", (i * 37) % 1001}, {"subject", subject}};
    if (!ingress.empty()) spec["ingress"] = ingress;
    if (!egress.empty()) spec["egress"] = egress;
    out.push_back({{"apiVersion", "policy.networking.k8s.io/v1alpha2"},
                   {"kind", "ClusterNetworkPolicy"},
                   {"metadata", {{"name", "cnp-" + std::to_string(i)}}},
                   {"spec", spec}});
  }
  (void)namespaces;
  return out;
}

}  // namespace weft::bench::netpol
