#pragma once
// Address families in weftd's configuration. Kubernetes' dual-stack flags
// take one entry per family, comma-separated (kube-controller-manager's
// --cluster-cidr "10.244.0.0/16,fd00:10:244::/56", kubelet's --node-ip
// "192.0.2.11,2001:db8::11"); weftd's --cluster-cidr and --node-ip do the
// same. Pure: unit-tested without root.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/ip.h"
#include "base/status.h"

namespace weft::overlay {

// "a[,b]": one or two CIDRs of different families, in the order given,
// host bits cleared. Errors (invalid-argument) name `flag` and the culprit: an
// empty entry, a CIDR that does not parse, two of one family, more than two.
Result<std::vector<IpPrefix>> ParseCidrPerFamily(std::string_view flag, std::string_view value);
// The same for addresses ("192.0.2.11,2001:db8::11").
Result<std::vector<IpAddress>> ParseIpPerFamily(std::string_view flag, std::string_view value);

// The first prefix of the family, if any.
std::optional<IpPrefix> OfFamily(const std::vector<IpPrefix>& prefixes, bool v6);
// "10.244.1.0/24,fd00:10:244:1::/64" ("-" when empty): for logs.
std::string JoinPrefixes(const std::vector<IpPrefix>& prefixes);
// "IPv4" or "IPv6".
inline const char* FamilyName(bool v6) { return v6 ? "IPv6" : "IPv4"; }

}  // namespace weft::overlay
