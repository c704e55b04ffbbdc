#pragma once
// Read-only nftables queries over raw nfnetlink (libnl-3 core). The plugin
// uses this to check, in tens of microseconds, whether a ruleset it owns is
// already in place, so it only pays for `nft -f` when something is missing.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace weft::sys {

enum class NftFamily { kIp = 2, kIp6 = 10, kInet = 1 };

struct NftRuleInfo {
  std::string chain;
  uint64_t handle = 0;
  std::string comment;
};

// The rules of `table` (only `chain`'s when it is not empty), in chain order,
// with their handles and comments. A missing table or chain yields an empty
// list, not an error.
Result<std::vector<NftRuleInfo>> NftRules(NftFamily family, const std::string& table, const std::string& chain = "");

// The comments of the rules in `table`/`chain`, in order.
Result<std::vector<std::string>> NftRuleComments(NftFamily family, const std::string& table,
                                                 const std::string& chain);

}  // namespace weft::sys
