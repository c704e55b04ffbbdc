#pragma once
// The cluster of the NetworkPolicy benchmark (bench/netpol_main.cc), as API
// objects: namespaces, nodes, pods and a realistic mix of policies. Pure: no
// I/O; the same scale always gives the same objects.
//
// Shape (full scale): 100 namespaces of 100 pods (10,000 pods), 110 of them
// on the measured node "bench-node" (10.244.0.0/24; its pods get
// 10.244.0.128 and up, leaving .0/25 for pods the benchmark attaches with
// the real plugin), the rest spread over 99 fake nodes (10.244.<n>.0/24).
// Which pods are local is a fixed pseudo-random draw, so the local pods have
// every label combination and sit in most namespaces.
//
// Labels: namespace team=t<n%10>, env=prod|staging|dev (n%3), and
// role=monitoring|ingress|dns on namespaces 0, 1, 2; pod app=app-<j%10>,
// tier=frontend|backend|db (j%3), pod-template-hash. Every pod has the named
// container ports http (8080/8081), metrics (9090) and grpc (50051), plus
// dns/dns-tcp (53) in the dns namespace. A pod object is ~2.5 kB of JSON,
// as a kubelet-reported pod without managedFields.
//
// Ten policies per namespace (1,000 at full scale), see Policies().

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace weft::bench::netpol {

struct Scale {
  int namespaces = 100;
  int pods_per_ns = 100;
  int local_pods = 110;
  int fake_nodes = 99;
  int total_pods() const { return namespaces * pods_per_ns; }
};

inline constexpr char kNode[] = "bench-node";
inline constexpr char kNodeCidr[] = "10.244.0.0/24";
inline constexpr char kClusterCidr[] = "10.244.0.0/16";
// Above 255 fake nodes (the 100,000-pod row: 999) node f gets
// 10.(240 + f / 256).(f % 256).0/24 inside this wider cluster CIDR, which
// still holds the measured node's 10.244.0.0/24.
inline constexpr char kWideClusterCidr[] = "10.240.0.0/12";
inline constexpr int kNarrowMaxNodes = 255;
// The fake node f's pod CIDR prefix ("10.244.7." or "10.241.3.") and host
// address (198.18.<f / 256>.<f % 256>).
std::string FakeNodePrefix(int f, const Scale& s);
std::string FakeNodeHostIp(int f);
inline const char* ClusterCidr(const Scale& s) {
  return s.fake_nodes > kNarrowMaxNodes ? kWideClusterCidr : kClusterCidr;
}
// What the benchmark's real pods are allocated from (the node's lower half).
inline constexpr char kRealPodRange[] = "10.244.0.0/25";

struct BenchPod {
  int ns = 0;  // namespace index
  int j = 0;   // index within the namespace
  std::string namespace_name, name, node, ip;
  bool local = false;
  std::string tier, app;
};

struct Cluster {
  Scale scale;
  std::vector<nlohmann::json> namespaces, nodes, policies;
  std::vector<BenchPod> pods;
  std::vector<size_t> local, remote;  // indices into pods

  nlohmann::json PodObject(const BenchPod& p) const;
};

Cluster MakeCluster(const Scale& scale);

std::string NamespaceName(int n);
nlohmann::json NamespaceLabels(int n);
nlohmann::json PodLabels(const BenchPod& p);
// The named container ports of a pod of namespace n.
nlohmann::json ContainerPorts(int n, int j);
// The ten policies of namespace n (of `count` namespaces).
std::vector<nlohmann::json> Policies(int n, int count);

// `count` ClusterNetworkPolicies (issue 23) over `namespaces` namespaces, a
// mix of both tiers: tenant isolation by team (Admin Deny from other teams
// after a Pass for the monitoring namespace), the metadata address denied
// (networks), DNS accepted (named port), node access (nodes peers), and
// Baseline defaults per environment; priorities spread over 0-1000 with
// ties.
std::vector<nlohmann::json> ClusterPolicies(int count, int namespaces);

// "Label name -> value" of the three tiers, cycled by relabel events.
std::string NextTier(const std::string& tier);

}  // namespace weft::bench::netpol
