#pragma once
// `weftctl service explain NS/NAME` (docs/weftctl.md, docs/services.md):
// asks weftd (GET /services/explain) what a new packet to a Service meets
// in table inet weft-services on this node, and renders it; with --from,
// also what NetworkPolicy makes of the translated destination (GET
// /netpol/explain, client -> each endpoint). The rendering is pure and
// unit-tested.

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/ctl.h"

namespace weft::doctor {

// Exit codes of `weftctl service explain`.
inline constexpr int kServiceExplained = 0;
inline constexpr int kServiceBadInput = 2;
inline constexpr int kServiceUnknown = 3;  // weftd's proxy does not know the Service
inline constexpr int kServiceNoWeftd = 4;  // unreachable, proxy off, not ready, or a bad answer

// GET /services/explain's JSON in words (the text `service explain` prints
// before its "policy after translation" section).
std::string RenderServiceExplanation(const nlohmann::json& e);

void AddServiceCommand(runtime::ctl::Ctl& ctl);

}  // namespace weft::doctor
