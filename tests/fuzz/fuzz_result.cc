// prevResult / plugin results of any version: decode, then encode in every
// version and decode again; a result that decodes must survive the trip.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "cni/result.h"
#include "cni/version.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto r = weft::cni::DecodeResult(j, "1.1.0");
  if (!r.ok()) return 0;
  for (const auto& v : weft::cni::SupportedVersions()) {
    auto out = weft::cni::EncodeResult(*r, v);
    if (!out.ok()) __builtin_trap();
    auto back = weft::cni::DecodeResult(*out, v);
    if (!back.ok()) __builtin_trap();  // what we print, we must read back
    if (back->ips.size() > r->ips.size()) __builtin_trap();
  }
  return 0;
}
