#pragma once
// Read-only nftables queries over raw nfnetlink (libnl-3 core). The plugin
// uses this to check, in tens of microseconds, whether a ruleset it owns is
// already in place, so it only pays for `nft -f` when something is missing.

#include <string>
#include <vector>

#include "base/status.h"

namespace weft::sys {

enum class NftFamily { kIp = 2, kIp6 = 10, kInet = 1 };

// The comments of the rules in `table`/`chain`, in order. A missing table or
// chain yields an empty list, not an error.
Result<std::vector<std::string>> NftRuleComments(NftFamily family, const std::string& table,
                                                 const std::string& chain);

}  // namespace weft::sys
