#include "sys/nft_query.h"

#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <netlink/errno.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include <endian.h>

#include <cstring>

#include "sys/netlink.h"

namespace weft::sys {
namespace {

struct DumpCtx {
  std::string chain;  // "" = every chain
  std::vector<NftRuleInfo> rules;
};

// Userdata is a TLV list: u8 type, u8 len, value. Type 0 is the rule comment.
std::string CommentFromUserdata(const uint8_t* p, int len) {
  int off = 0;
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

int OnRule(nl_msg* msg, void* arg) {
  auto* ctx = static_cast<DumpCtx*>(arg);
  nlmsghdr* nlh = nlmsg_hdr(msg);
  nlattr* tb[NFTA_RULE_MAX + 1];
  if (nlmsg_parse(nlh, sizeof(nfgenmsg), tb, NFTA_RULE_MAX, nullptr) < 0) return NL_SKIP;
  NftRuleInfo r;
  if (tb[NFTA_RULE_CHAIN]) r.chain = nla_get_string(tb[NFTA_RULE_CHAIN]);
  if (!ctx->chain.empty() && ctx->chain != r.chain) return NL_OK;
  if (tb[NFTA_RULE_HANDLE]) r.handle = be64toh(nla_get_u64(tb[NFTA_RULE_HANDLE]));
  if (tb[NFTA_RULE_USERDATA])
    r.comment = CommentFromUserdata(static_cast<const uint8_t*>(nla_data(tb[NFTA_RULE_USERDATA])),
                                    nla_len(tb[NFTA_RULE_USERDATA]));
  ctx->rules.push_back(std::move(r));
  return NL_OK;
}

}  // namespace

Result<std::vector<std::string>> NftRuleComments(NftFamily family, const std::string& table,
                                                 const std::string& chain) {
  WEFT_ASSIGN_OR_RETURN(auto rules, NftRules(family, table, chain));
  std::vector<std::string> out;
  for (auto& r : rules) out.push_back(std::move(r.comment));
  return out;
}

namespace {

// One dump of the rules, on a socket of its own (an interrupted dump is
// read to its end by libnl, so the next attempt starts clean).
Result<std::vector<NftRuleInfo>> DumpRules(NftFamily family, const std::string& table, const std::string& chain) {
  nl_sock* sk = nl_socket_alloc();
  if (!sk) return Status::Error(Reason::kFailed, Domain::kFirewall, "allocate nfnetlink socket");
  struct Free {
    nl_sock* s;
    ~Free() { nl_socket_free(s); }
  } free_sk{sk};
  int err = nl_connect(sk, NETLINK_NETFILTER);
  if (err < 0) return NlError(err, "connect nfnetlink");

  nl_msg* msg = nlmsg_alloc_simple((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETRULE,
                                   NLM_F_REQUEST | NLM_F_DUMP);
  if (!msg) return Status::Error(Reason::kFailed, Domain::kFirewall, "allocate nfnetlink message");
  nfgenmsg hdr{};
  hdr.nfgen_family = static_cast<uint8_t>(family);
  hdr.version = NFNETLINK_V0;
  nlmsg_append(msg, &hdr, sizeof hdr, NLMSG_ALIGNTO);
  nla_put_string(msg, NFTA_RULE_TABLE, table.c_str());
  if (!chain.empty()) nla_put_string(msg, NFTA_RULE_CHAIN, chain.c_str());
  err = nl_send_auto(sk, msg);
  nlmsg_free(msg);
  if (err < 0) return NlError(err, "send nftables rule dump");

  DumpCtx ctx{chain, {}};
  nl_socket_modify_cb(sk, NL_CB_VALID, NL_CB_CUSTOM, OnRule, &ctx);
  err = nl_recvmsgs_default(sk);
  if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV) return std::vector<NftRuleInfo>{};
  if (err < 0) return NlError(err, "dump nftables rules of " + table + (chain.empty() ? "" : "/" + chain));
  return ctx.rules;
}

}  // namespace

Result<std::vector<NftRuleInfo>> NftRules(NftFamily family, const std::string& table, const std::string& chain) {
  return RetryInterruptedNftDump<std::vector<NftRuleInfo>>([&] { return DumpRules(family, table, chain); });
}

}  // namespace weft::sys
