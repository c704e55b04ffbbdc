#pragma once
// CNI spec versions: parsing, ordering and the set this implementation speaks.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::cni {

struct Version {
  int major = 0, minor = 0, patch = 0;
  static std::optional<Version> Parse(std::string_view s);  // "1.1.0"
  std::string ToString() const;
  auto operator<=>(const Version&) const = default;
};

inline constexpr std::string_view kLatestVersion = "1.1.0";
// Every version whose configs we accept and whose results we can print.
const std::vector<std::string>& SupportedVersions();
bool IsSupported(std::string_view v);
// a < b by version order; unparsable versions sort first.
bool VersionLess(std::string_view a, std::string_view b);
// True when `v` is at least `min` (both parsable).
bool AtLeast(std::string_view v, std::string_view min);

}  // namespace weft::cni
