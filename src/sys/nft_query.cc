#include "sys/nft_query.h"

#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <endian.h>

#include <cerrno>
#include <cstring>

#include "sys/nfnetlink.h"

namespace weft::sys {
namespace {

// Userdata is a TLV list: u8 type, u8 len, value. Type 0 is the rule comment.
std::string CommentFromUserdata(const uint8_t* p, size_t len) {
  size_t off = 0;
  while (off + 2 <= len) {
    uint8_t type = p[off], l = p[off + 1];
    if (off + 2 + l > len) break;
    if (type == 0 && l > 0) {
      const char* s = reinterpret_cast<const char*>(p + off + 2);
      return std::string(s, strnlen(s, l));
    }
    off += 2 + l;
  }
  return {};
}

// One dump of the rules over the shared raw nfnetlink stack, on a socket of
// its own (an interrupted dump is read to its end, so the next attempt
// starts clean).
Result<std::vector<NftRuleInfo>> DumpRules(NftFamily family, const std::string& table, const std::string& chain) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  NfnlMsg m((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETRULE, NLM_F_REQUEST | NLM_F_DUMP, 1,
            static_cast<uint8_t>(family));
  m.Str(NFTA_RULE_TABLE, table);
  if (!chain.empty()) m.Str(NFTA_RULE_CHAIN, chain);
  const std::string what = "dump nftables rules of " + table + (chain.empty() ? "" : "/" + chain);
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), m.Done(), what));
  std::vector<NftRuleInfo> rules;
  Status st = NfnlReadDump(fd.get(), what, [&](const char* p, size_t len) {
    NftRuleInfo r;
    ForEachNfAttr(p, len, [&](uint16_t t, const char* d, size_t l) {
      if (t == NFTA_RULE_CHAIN) r.chain = std::string(d, strnlen(d, l));
      if (t == NFTA_RULE_HANDLE && l == 8) {
        uint64_t be;
        std::memcpy(&be, d, sizeof be);
        r.handle = be64toh(be);
      }
      if (t == NFTA_RULE_USERDATA) r.comment = CommentFromUserdata(reinterpret_cast<const uint8_t*>(d), l);
    });
    if (!chain.empty() && r.chain != chain) return;
    rules.push_back(std::move(r));
  });
  // A missing table or chain is an empty list.
  if (!st.ok() && (st.sys_errno() == ENOENT || st.sys_errno() == ENODEV)) return std::vector<NftRuleInfo>{};
  if (!st.ok()) return st;
  return rules;
}

Result<std::vector<std::string>> DumpChains(NftFamily family, const std::string& table) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  NfnlMsg m((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETCHAIN, NLM_F_REQUEST | NLM_F_DUMP, 1,
            static_cast<uint8_t>(family));
  const std::string what = "dump nftables chains of " + table;
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), m.Done(), what));
  std::vector<std::string> chains;
  // The dump holds every chain of the family: keep `table`'s.
  Status st = NfnlReadDump(fd.get(), what, [&](const char* p, size_t len) {
    std::string t, name;
    ForEachNfAttr(p, len, [&](uint16_t type, const char* d, size_t l) {
      if (type == NFTA_CHAIN_TABLE) t = std::string(d, strnlen(d, l));
      if (type == NFTA_CHAIN_NAME) name = std::string(d, strnlen(d, l));
    });
    if (t == table) chains.push_back(std::move(name));
  });
  if (!st.ok() && (st.sys_errno() == ENOENT || st.sys_errno() == ENODEV)) return std::vector<std::string>{};
  if (!st.ok()) return st;
  return chains;
}

}  // namespace

Result<std::vector<std::string>> NftChains(NftFamily family, const std::string& table) {
  return RetryInterruptedNftDump<std::vector<std::string>>([&] { return DumpChains(family, table); });
}

Result<std::vector<std::string>> NftRuleComments(NftFamily family, const std::string& table,
                                                 const std::string& chain) {
  WEFT_ASSIGN_OR_RETURN(auto rules, NftRules(family, table, chain));
  std::vector<std::string> out;
  for (auto& r : rules) out.push_back(std::move(r.comment));
  return out;
}

Result<std::vector<NftRuleInfo>> NftRules(NftFamily family, const std::string& table, const std::string& chain) {
  return RetryInterruptedNftDump<std::vector<NftRuleInfo>>([&] { return DumpRules(family, table, chain); });
}

}  // namespace weft::sys
