#include "cni/version.h"

#include <algorithm>

#include "base/strings.h"

namespace weft::cni {

std::optional<Version> Version::Parse(std::string_view s) {
  auto parts = Split(s, '.');
  if (parts.empty() || parts.size() > 3) return std::nullopt;
  int v[3] = {0, 0, 0};
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty() || parts[i].size() > 6) return std::nullopt;
    for (char c : parts[i]) {
      if (c < '0' || c > '9') return std::nullopt;
      v[i] = v[i] * 10 + (c - '0');
    }
  }
  return Version{v[0], v[1], v[2]};
}

std::string Version::ToString() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

const std::vector<std::string>& SupportedVersions() {
  static const std::vector<std::string> kVersions = {"0.1.0", "0.2.0", "0.3.0", "0.3.1",
                                                     "0.4.0", "1.0.0", "1.1.0"};
  return kVersions;
}

bool IsSupported(std::string_view v) {
  const auto& all = SupportedVersions();
  return std::find(all.begin(), all.end(), v) != all.end();
}

bool VersionLess(std::string_view a, std::string_view b) {
  auto va = Version::Parse(a), vb = Version::Parse(b);
  if (!va) return vb.has_value();
  if (!vb) return false;
  return *va < *vb;
}

bool AtLeast(std::string_view v, std::string_view min) {
  auto a = Version::Parse(v), b = Version::Parse(min);
  return a && b && *a >= *b;
}

}  // namespace weft::cni
