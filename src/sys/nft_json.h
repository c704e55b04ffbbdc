#pragma once
// A Transaction (sys/nft_types.h) as JSON and back, object for object:
// how weftd hands the table it wants to `weftctl doctor` (GET
// /netpol/ruleset), which compares it with the kernel's and, with --fix,
// applies it through the layer as one transaction. Bytes (keys, compared
// data, masks, set userdata) are lowercase hex strings. Pure.
//
//   {"family": "inet", "table": "weft-netpol", "ops": [
//     {"verb": "add", "table": {"name": "weft-netpol"}},
//     {"verb": "add", "chain": {"name": "forward", "hook": {"num": 2, "priority": 0, "type": "filter",
//                                                           "policy": 1}}},
//     {"verb": "add", "rule": {"chain": "forward", "comment": "",
//                              "exprs": [{"ct": {"key": 0, "dreg": 1}}, {"verdict": {"code": 1}}]}},
//     {"verb": "add", "elements": {"set": "local4", "elems": [{"key": "0a000101"}]}}]}
//
// Decoding refuses what is not such a document (an unknown verb, object
// kind, expression, field type or non-hex bytes) with a kMalformed error
// naming the op; it never guesses.

#include <string>
#include <string_view>

#include "base/status.h"
#include "sys/nft_types.h"

namespace weft::sys::nft {

std::string TransactionJson(const Transaction& tx);
Result<Transaction> ParseTransactionJson(std::string_view text);

}  // namespace weft::sys::nft
