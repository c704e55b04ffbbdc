#include "sys/nft_query.h"

#include <cerrno>

#include "sys/nft_kernel.h"

namespace weft::sys {

namespace {

// A missing table or chain (ENODEV: a netdev chain's device gone) is an
// empty list.
template <typename T>
Result<std::vector<T>> EmptyWhenMissing(Result<std::vector<T>> r) {
  if (!r.ok() && (r.status().sys_errno() == ENOENT || r.status().sys_errno() == ENODEV)) return std::vector<T>{};
  return r;
}

}  // namespace

Result<std::vector<std::string>> NftChains(NftFamily family, const std::string& table) {
  WEFT_ASSIGN_OR_RETURN(auto chains, EmptyWhenMissing(nft::Kernel().Chains(family, table)));
  std::vector<std::string> out;
  for (auto& c : chains) out.push_back(std::move(c.name));
  return out;
}

Result<std::vector<std::string>> NftRuleComments(NftFamily family, const std::string& table,
                                                 const std::string& chain) {
  WEFT_ASSIGN_OR_RETURN(auto rules, NftRules(family, table, chain));
  std::vector<std::string> out;
  for (auto& r : rules) out.push_back(std::move(r.comment));
  return out;
}

Result<std::vector<NftRuleInfo>> NftRules(NftFamily family, const std::string& table, const std::string& chain) {
  WEFT_ASSIGN_OR_RETURN(auto rules, EmptyWhenMissing(nft::Kernel().RuleHeads(family, table, chain)));
  std::vector<NftRuleInfo> out;
  for (auto& r : rules) out.push_back({std::move(r.chain), r.handle, std::move(r.comment)});
  return out;
}

}  // namespace weft::sys
