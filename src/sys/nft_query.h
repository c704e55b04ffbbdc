#pragma once
// Read-only nftables queries, through the typed layer's narrow reads
// (sys/nft_kernel.h: libnftnl, one request each). The plugin uses them to
// check, in tens of microseconds, whether a ruleset it owns is already in
// place, so it only installs what is missing. The family enum here is the
// layer's too (nft::Family).

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sys/nft_family.h"

namespace weft::sys {

struct NftRuleInfo {
  std::string chain;
  uint64_t handle = 0;
  std::string comment;
};

// The rules of `table` (only `chain`'s when it is not empty), in chain order,
// with their handles and comments. A missing table or chain yields an empty
// list, not an error.
Result<std::vector<NftRuleInfo>> NftRules(NftFamily family, const std::string& table, const std::string& chain = "");

// The names of the chains of `table` (a missing table: none).
Result<std::vector<std::string>> NftChains(NftFamily family, const std::string& table);

// The comments of the rules in `table`/`chain`, in order.
Result<std::vector<std::string>> NftRuleComments(NftFamily family, const std::string& table,
                                                 const std::string& chain);

}  // namespace weft::sys
