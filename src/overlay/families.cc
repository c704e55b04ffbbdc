#include "overlay/families.h"

#include "base/strings.h"

namespace weft::overlay {
namespace {

// Splits "a,b" into trimmed entries; at most two, none empty.
Result<std::vector<std::string>> Entries(std::string_view flag, std::string_view value, const char* what) {
  std::vector<std::string> out;
  for (auto part : Split(value, ',')) {
    std::string_view t = Trim(part);
    if (t.empty())
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig, std::string(flag) + " \"" + std::string(value) +
                                                     "\": an empty entry (give one " + what +
                                                     " per family, comma-separated)");
    out.emplace_back(t);
  }
  if (out.size() > 2)
    return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                         std::string(flag) + " \"" + std::string(value) + "\": " +
                                                   std::to_string(out.size()) + " entries; give at most one " +
                                                   what + " per family (IPv4 and IPv6)");
  return out;
}

Status SameFamily(std::string_view flag, const std::string& a, const std::string& b, bool v6, const char* what) {
  return Status::Error(Reason::kInvalidArgument, Domain::kConfig,
                       std::string(flag) + ": two " + FamilyName(v6) + " " + what + " (" + a +
                                                 " and " + b + "); give at most one per family");
}

}  // namespace

Result<std::vector<IpPrefix>> ParseCidrPerFamily(std::string_view flag, std::string_view value) {
  WEFT_ASSIGN_OR_RETURN(auto entries, Entries(flag, value, "CIDR"));
  std::vector<IpPrefix> out;
  for (const auto& e : entries) {
    auto p = IpPrefix::Parse(e);
    if (!p)
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig, std::string(flag) + ": \"" + e +
                                                     "\" is not a CIDR (e.g. 10.244.0.0/16 or fd00:10:244::/56)");
    for (const auto& q : out)
      if (q.is_v4() == p->is_v4()) return SameFamily(flag, q.ToString(), p->Masked().ToString(), !p->is_v4(), "CIDRs");
    out.push_back(p->Masked());
  }
  return out;
}

Result<std::vector<IpAddress>> ParseIpPerFamily(std::string_view flag, std::string_view value) {
  WEFT_ASSIGN_OR_RETURN(auto entries, Entries(flag, value, "address"));
  std::vector<IpAddress> out;
  for (const auto& e : entries) {
    auto a = IpAddress::Parse(e);
    if (!a)
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig, std::string(flag) + ": \"" + e +
                                                     "\" is not an IP address (e.g. 192.0.2.11 or 2001:db8::11)");
    for (const auto& b : out)
      if (b.is_v4() == a->is_v4()) return SameFamily(flag, b.ToString(), a->ToString(), a->is_v6(), "addresses");
    out.push_back(*a);
  }
  return out;
}

std::optional<IpPrefix> OfFamily(const std::vector<IpPrefix>& prefixes, bool v6) {
  for (const auto& p : prefixes)
    if (p.is_v4() != v6) return p;
  return std::nullopt;
}

std::string JoinPrefixes(const std::vector<IpPrefix>& prefixes) {
  std::string out;
  for (const auto& p : prefixes) {
    if (!out.empty()) out += ",";
    out += p.ToString();
  }
  return out.empty() ? "-" : out;
}

}  // namespace weft::overlay
