#pragma once
// Doctor's Service proxy check (issue 31, docs/weftctl.md `services-table`):
// table inet weft-services as weftd's proxy wants it (GET
// /services/ruleset?format=json, applied to the nftables layer's fake) and
// as the kernel holds it (the layer's dump), both digested as the proxy's
// own periodic check digests them (services::DigestOf: anonymous sets
// inlined, affinity sets' dynamic contents left out), and every difference
// put down to the Service it belongs to: a chain's or set's name carries
// "ns/name/proto/port" (proxy_table.h's ChainName), a map element is the
// Service of the chain it goes to. Pure; doctor_io.cc reads both sides.

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "services/proxy_model.h"
#include "sys/nft_types.h"

namespace weft::doctor {

inline constexpr char kServicesTable[] = "inet weft-services";

// "s/web" for "svc4-Z7R6XF5F-s/web/tcp/http", "ep4-...-s/web/tcp/http__10.0.0.1/80",
// "aff6-...": the Service a chain or set of the proxy belongs to; "" for the
// table's fixed part (services, reject-chain, the maps, ...).
std::string ServiceOfObject(const std::string& name);

// The differences of one Service (or of the fixed part: service "").
struct ServiceDiff {
  std::string service;             // "ns/name"; "" the fixed part; "?" a no-endpoint entry (no name in the table)
  std::vector<std::string> lines;  // one per difference, in nft's words
};
// How `have` (the kernel's) differs from `want` (weftd's), per Service,
// sorted by service. Empty when equal.
std::vector<ServiceDiff> DiffServicesTables(const services::TableDigest& want, const services::TableDigest& have);

// GET /services/ruleset?format=json's body: the transaction (checked to be
// table inet weft-services's), and its table as the layer's fake holds it
// once applied, digested.
Result<sys::nft::Transaction> ServicesRulesetTransaction(const std::string& body);
Result<services::TableDigest> ServicesRulesetDigest(const std::string& body);

}  // namespace weft::doctor
