#pragma once
// Which tool carries Weft's firewall rules on a node. The plugin's
// `masqueradeBackend` key (its masquerade and hostPort rules) and weftd's
// --masquerade-backend (the node-wide masquerade, and the hostPort rules of
// the attachments it reclaims) name the same choice, so both use this type:
// src/fw is the layer below both.

#include <optional>
#include <string_view>

namespace weft::fw {

enum class Backend { kNftables, kIptables };

// "nftables" or "iptables", as the config key and the flag spell them.
constexpr std::string_view BackendName(Backend b) {
  return b == Backend::kIptables ? "iptables" : "nftables";
}

// The inverse of BackendName; nullopt for any other spelling.
constexpr std::optional<Backend> ParseBackend(std::string_view name) {
  if (name == "nftables") return Backend::kNftables;
  if (name == "iptables") return Backend::kIptables;
  return std::nullopt;
}

}  // namespace weft::fw
