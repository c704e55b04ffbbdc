#pragma once
// A test fixture, not product code: the firewall tables as the plugin wrote
// them up to commit 8542670, `nft -f` scripts built as text
// (src/fw/masquerade.cc's RenderNftMasquerade there), kept so
// fw_nft_equivalence_test can prove the typed transactions that replaced
// them build the same tables, and that a node upgraded from the text path
// takes the new ones over.

#include <string>
#include <vector>

#include "fw/masquerade.h"

namespace weft::testing {

inline std::string MasqueradeText(const fw::MasqueradeSpec& spec) {
  auto family = [](const std::vector<IpPrefix>& in, bool v6) {
    std::vector<IpPrefix> out;
    for (const auto& p : in)
      if (p.is_v4() != v6) out.push_back(p);
    return out;
  };
  auto join = [](const std::vector<IpPrefix>& ps) {
    std::string s;
    for (const auto& p : ps) s += (s.empty() ? "" : ", ") + p.ToString();
    return s;
  };
  std::vector<IpPrefix> no_masq = spec.no_masq;
  no_masq.insert(no_masq.end(), spec.pod_ranges.begin(), spec.pod_ranges.end());
  no_masq = fw::Normalize(no_masq);
  std::string t = fw::NftTableName(spec.network);
  std::string marker = fw::MasqMarker(spec);
  std::string s;
  s += "table inet " + t + "\n";
  s += "delete table inet " + t + "\n";
  s += "table inet " + t + " {\n";
  std::string rules;
  for (bool v6 : {false, true}) {
    auto src = family(fw::Normalize(spec.pod_ranges), v6);
    if (src.empty()) continue;
    auto dst = family(no_masq, v6);
    std::string f = v6 ? "6" : "4";
    std::string type = v6 ? "ipv6_addr" : "ipv4_addr";
    s += "  set pods" + f + " { type " + type + "; flags interval; elements = { " + join(src) + " } }\n";
    s += "  set nomasq" + f + " { type " + type + "; flags interval; elements = { " + join(dst) + " } }\n";
    std::string ip = v6 ? "ip6" : "ip";
    rules += "    " + ip + " saddr @pods" + f + " " + ip + " daddr != @nomasq" + f + " masquerade comment \"" + marker +
             "\"\n";
  }
  s += "  chain postrouting {\n";
  s += "    type nat hook postrouting priority srcnat; policy accept;\n";
  s += rules;
  s += "  }\n}\n";
  return s;
}

}  // namespace weft::testing
