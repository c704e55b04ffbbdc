#pragma once
// For tests only (the policy unit tests and the netns tests that drive the
// engine): a Pod from its parts, as the informer would decode it, and the
// engine's transactions in nft's syntax.

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "base/ip.h"
#include "policy/netpol_model.h"
#include "policy/netpol_nft.h"
#include "policy/netpol_types.h"
#include "sys/nft_fake.h"
#include "sys/nft_render.h"

namespace weft::policy::netpol::test_util {

// A pod's addresses as text: "10.0.0.1", {"10.0.0.1", "fd00::1"}, or ""
// for a pod without an address yet.
struct Ips {
  std::vector<std::string> list;
  Ips(const char* ip) {  // NOLINT(google-explicit-constructor): the point is brevity
    if (*ip != '\0') list.emplace_back(ip);
  }
  Ips(const std::string& ip) {  // NOLINT(google-explicit-constructor)
    if (!ip.empty()) list.push_back(ip);
  }
  Ips(std::initializer_list<const char*> ips) : list(ips.begin(), ips.end()) {}
};

inline Pod MakePod(const std::string& ns, const std::string& name, Labels labels, const std::string& node,
                   const Ips& ips, std::vector<ContainerPort> ports = {}) {
  Pod p;
  p.ns = ns;
  p.name = name;
  p.labels = std::move(labels);
  p.node = node;
  for (const auto& ip : ips.list) p.ips.push_back(*IpAddress::Parse(ip));
  p.ports = std::move(ports);
  return p;
}

// The rules of `chain` as `nft list` prints them.
inline std::vector<std::string> RulesText(const Engine& e, const std::string& chain) {
  std::vector<std::string> out;
  for (const auto& r : e.desired().chains.at(chain)) out.push_back(nftr::Render(r));
  return out;
}

// The sets and maps of the desired model, for rendering elements.
inline std::vector<sys::nft::Set> KnownSets(const Engine& e) {
  std::vector<sys::nft::Set> out;
  for (const auto& [name, def] : e.desired().sets) out.push_back(SetObject(name, def));
  for (const char* m : kDispatchMaps) out.push_back(DispatchMapObject(m));
  return out;
}

// A transaction as nft commands, one per line.
inline std::string TxText(const Engine& e, const sys::nft::Transaction& tx) {
  const auto known = KnownSets(e);
  std::string out;
  for (const auto& op : tx.ops()) out += sys::nft::RenderOp(tx.family(), tx.table(), op, known) + "\n";
  return out;
}
inline std::string DeltaText(const Engine& e) {
  auto tx = e.Delta();
  return tx.ok() ? TxText(e, *tx) : "error: " + tx.status().ToString();
}
inline std::string FullText(const Engine& e) {
  auto tx = e.Full();
  return tx.ok() ? TxText(e, *tx) : "error: " + tx.status().ToString();
}

// The table Full() builds, as `nft list table` would print it (through the
// layer's fake).
inline std::string TableText(const Engine& e) {
  auto tx = e.Full();
  if (!tx.ok()) return "error: " + tx.status().ToString();
  sys::nft::Fake fake;
  if (Status st = fake.Apply(*tx); !st.ok()) return "error: " + st.ToString();
  auto t = fake.Dump(sys::nft::Family::kInet, kTable);
  return t.ok() ? sys::nft::RenderTable(*t) : "error: " + t.status().ToString();
}

}  // namespace weft::policy::netpol::test_util
