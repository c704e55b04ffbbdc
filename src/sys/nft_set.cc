#include "sys/nft_set.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sys/nfnetlink.h"


namespace weft::sys {
namespace {

// nft_data: a nest holding NFTA_DATA_VALUE.
void PutData(NfnlMsg& m, uint16_t type, const std::string& bytes) {
  size_t n = m.Begin(type);
  m.Attr(NFTA_DATA_VALUE, bytes.data(), bytes.size());
  m.End(n);
}

uint16_t NftType(int msg) { return static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg); }

std::string DataValue(const char* p, size_t len) {
  std::string v;
  ForEachNfAttr(p, len, [&](uint16_t t, const char* d, size_t n) {
    if (t == NFTA_DATA_VALUE) v.assign(d, n);
  });
  return v;
}

// NFT_MSG_DESTROYCHAIN (Linux 6.3); Debian 12's UAPI headers predate it.
constexpr int kMsgDestroyChain = 27;

// One expression: its name, then its attributes in NFTA_EXPR_DATA.
template <typename F>
void PutExprData(NfnlMsg& m, const char* name, F fill) {
  m.Str(NFTA_EXPR_NAME, name);
  size_t d = m.Begin(NFTA_EXPR_DATA);
  fill();
  m.End(d);
}

void PutExpr(NfnlMsg& m, const NftExpr& e) {
  size_t el = m.Begin(NFTA_LIST_ELEM);
  switch (e.kind) {
    case NftExpr::kMeta:
      PutExprData(m, "meta", [&] {
        m.U32Be(NFTA_META_KEY, e.key);
        m.U32Be(NFTA_META_DREG, NFT_REG_1);
      });
      break;
    case NftExpr::kPayload:
      PutExprData(m, "payload", [&] {
        m.U32Be(NFTA_PAYLOAD_DREG, NFT_REG_1);
        m.U32Be(NFTA_PAYLOAD_BASE, e.base);
        m.U32Be(NFTA_PAYLOAD_OFFSET, e.offset);
        m.U32Be(NFTA_PAYLOAD_LEN, e.len);
      });
      break;
    case NftExpr::kCmp:
      PutExprData(m, "cmp", [&] {
        m.U32Be(NFTA_CMP_SREG, NFT_REG_1);
        m.U32Be(NFTA_CMP_OP, e.equal ? NFT_CMP_EQ : NFT_CMP_NEQ);
        PutData(m, NFTA_CMP_DATA, e.data);
      });
      break;
    case NftExpr::kVerdict:
      PutExprData(m, "immediate", [&] {
        m.U32Be(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        size_t data = m.Begin(NFTA_IMMEDIATE_DATA);
        size_t v = m.Begin(NFTA_DATA_VERDICT);
        m.U32Be(NFTA_VERDICT_CODE, static_cast<uint32_t>(e.verdict));
        if (!e.chain.empty()) m.Str(NFTA_VERDICT_CHAIN, e.chain);
        m.End(v);
        m.End(data);
      });
      break;
  }
  m.End(el);
}

// The message of one chain or rule change.
std::string ChainMessage(const NftChange& c, const std::string& table, uint8_t fam, uint32_t seq) {
  switch (c.op) {
    case NftChange::kAddIngressChain: {
      NfnlMsg m(NftType(NFT_MSG_NEWCHAIN), NLM_F_REQUEST | NLM_F_CREATE, seq, fam);
      m.Str(NFTA_CHAIN_TABLE, table);
      m.Str(NFTA_CHAIN_NAME, c.chain);
      size_t h = m.Begin(NFTA_CHAIN_HOOK);
      m.U32Be(NFTA_HOOK_HOOKNUM, NF_NETDEV_INGRESS);
      m.U32Be(NFTA_HOOK_PRIORITY, static_cast<uint32_t>(c.priority));
      m.Str(NFTA_HOOK_DEV, c.device);
      m.End(h);
      m.U32Be(NFTA_CHAIN_POLICY, NF_ACCEPT);
      m.Str(NFTA_CHAIN_TYPE, "filter");
      return m.Done();
    }
    case NftChange::kFlushChain: {
      // DELRULE without a handle: every rule of the chain.
      NfnlMsg m(NftType(NFT_MSG_DELRULE), NLM_F_REQUEST, seq, fam);
      m.Str(NFTA_RULE_TABLE, table);
      m.Str(NFTA_RULE_CHAIN, c.chain);
      return m.Done();
    }
    case NftChange::kAddRule: {
      NfnlMsg m(NftType(NFT_MSG_NEWRULE), NLM_F_REQUEST | NLM_F_CREATE | NLM_F_APPEND, seq, fam);
      m.Str(NFTA_RULE_TABLE, table);
      m.Str(NFTA_RULE_CHAIN, c.chain);
      size_t list = m.Begin(NFTA_RULE_EXPRESSIONS);
      for (const auto& e : c.rule) PutExpr(m, e);
      m.End(list);
      return m.Done();
    }
    case NftChange::kDeleteChain:
    case NftChange::kDestroyChain: {
      NfnlMsg m(NftType(c.op == NftChange::kDeleteChain ? NFT_MSG_DELCHAIN : kMsgDestroyChain), NLM_F_REQUEST, seq,
                fam);
      m.Str(NFTA_CHAIN_TABLE, table);
      m.Str(NFTA_CHAIN_NAME, c.chain);
      return m.Done();
    }
    default:
      return {};
  }
}

bool IsChainOp(NftChange::Op op) {
  return op == NftChange::kAddIngressChain || op == NftChange::kFlushChain || op == NftChange::kAddRule ||
         op == NftChange::kDeleteChain || op == NftChange::kDestroyChain;
}

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out = "0x";
  for (unsigned char b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

}  // namespace

NftRule NftMatchProtocol(uint16_t ethertype) {
  const uint16_t be = htons(ethertype);
  NftExpr meta{.kind = NftExpr::kMeta, .key = NFT_META_PROTOCOL};
  NftExpr cmp{.kind = NftExpr::kCmp, .data = std::string(reinterpret_cast<const char*>(&be), sizeof be)};
  return {meta, cmp};
}

NftRule NftMatchL4Proto(uint8_t proto, bool equal) {
  NftExpr meta{.kind = NftExpr::kMeta, .key = NFT_META_L4PROTO};
  NftExpr cmp{.kind = NftExpr::kCmp, .equal = equal, .data = std::string(1, static_cast<char>(proto))};
  return {meta, cmp};
}

NftRule NftMatchPayload(NftHeader header, uint32_t offset, const std::string& bytes, bool equal) {
  const uint32_t base = header == NftHeader::kLink      ? NFT_PAYLOAD_LL_HEADER
                        : header == NftHeader::kNetwork ? NFT_PAYLOAD_NETWORK_HEADER
                                                        : NFT_PAYLOAD_TRANSPORT_HEADER;
  NftExpr load{.kind = NftExpr::kPayload, .base = base, .offset = offset, .len = static_cast<uint32_t>(bytes.size())};
  NftExpr cmp{.kind = NftExpr::kCmp, .equal = equal, .data = bytes};
  return {load, cmp};
}

NftRule NftAccept() { return {NftExpr{.kind = NftExpr::kVerdict, .verdict = NF_ACCEPT}}; }

NftRule NftGoto(const std::string& chain) {
  return {NftExpr{.kind = NftExpr::kVerdict, .verdict = NFT_GOTO, .chain = chain}};
}

NftRule operator+(NftRule a, const NftRule& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string DescribeNftRule(const NftRule& rule) {
  std::string out;
  for (const auto& e : rule) {
    if (!out.empty()) out += " ";
    switch (e.kind) {
      case NftExpr::kMeta:
        out += e.key == NFT_META_PROTOCOL ? "meta protocol" : e.key == NFT_META_L4PROTO ? "meta l4proto"
                                                                                           : "meta " + std::to_string(e.key);
        break;
      case NftExpr::kPayload:
        out += std::string(e.base == NFT_PAYLOAD_LL_HEADER ? "@ll" : e.base == NFT_PAYLOAD_NETWORK_HEADER ? "@nh" : "@th") +
               "," + std::to_string(e.offset * 8) + "," + std::to_string(e.len * 8);
        break;
      case NftExpr::kCmp:
        out += std::string(e.equal ? "== " : "!= ") + Hex(e.data);
        break;
      case NftExpr::kVerdict:
        out += e.verdict == NF_ACCEPT ? "accept" : e.verdict == NFT_GOTO ? "goto " + e.chain : "verdict " + std::to_string(e.verdict);
        break;
    }
  }
  return out;
}

Status NftApply(NftFamily family, const std::string& table, const std::vector<NftChange>& changes,
                UniqueFd* keep) {
  if (changes.empty()) return Status::Ok();
  const uint8_t fam = static_cast<uint8_t>(family);
  uint32_t seq = 1;
  std::string batch = NfnlMsg(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq++, AF_UNSPEC, NFNL_SUBSYS_NFTABLES).Done();
  // Only the last message asks for an acknowledgement: the kernel answers
  // every failed message of a batch anyway, and an answer to each of
  // thousands of messages (a run of one change each, when the changes
  // alternate between sets) overflowed the socket's receive buffer
  // (ENOBUFS: the overlay filter at 999 peers).
  size_t last = 0;
  // One message per run of changes to the same set with the same op.
  for (size_t i = 0; i < changes.size();) {
    const NftChange& c = changes[i];
    last = batch.size();
    if (IsChainOp(c.op)) {
      batch += ChainMessage(c, table, fam, seq++);
      ++i;
      continue;
    }
    if (c.op == NftChange::kDeleteTable) {
      NfnlMsg m(NftType(NFT_MSG_DELTABLE), NLM_F_REQUEST, seq++, fam);
      m.Str(NFTA_TABLE_NAME, table);
      batch += m.Done();
      ++i;
      continue;
    }
    const bool add = c.op == NftChange::kAddElement;
    // NFT_MSG_DESTROYSETELEM (Linux 6.3); Debian 12's UAPI headers predate it.
    constexpr int kMsgDestroySetElem = 30;
    const int type = add ? NFT_MSG_NEWSETELEM : c.op == NftChange::kDestroyElement ? kMsgDestroySetElem : NFT_MSG_DELSETELEM;
    NfnlMsg m(NftType(type), NLM_F_REQUEST | (add ? NLM_F_CREATE : 0), seq++, fam);
    m.Str(NFTA_SET_ELEM_LIST_TABLE, table);
    m.Str(NFTA_SET_ELEM_LIST_SET, c.elem.set);
    size_t list = m.Begin(NFTA_SET_ELEM_LIST_ELEMENTS);
    // At most 500 elements per message: a nest's length is 16 bits.
    for (size_t n = 0; n < 500 && i < changes.size() && changes[i].op == c.op && changes[i].elem.set == c.elem.set;
         ++i, ++n) {
      const NftElement& e = changes[i].elem;
      size_t el = m.Begin(NFTA_LIST_ELEM);
      PutData(m, NFTA_SET_ELEM_KEY, e.key);
      if (!e.key_end.empty()) PutData(m, NFTA_SET_ELEM_KEY_END, e.key_end);
      if (add && !e.data.empty()) PutData(m, NFTA_SET_ELEM_DATA, e.data);
      if (e.flags) {
        uint32_t be = htonl(e.flags);
        m.Attr(NFTA_SET_ELEM_FLAGS, &be, sizeof be);
      }
      m.End(el);
    }
    m.End(list);
    batch += m.Done();
  }
  reinterpret_cast<nlmsghdr*>(batch.data() + last)->nlmsg_flags |= NLM_F_ACK;
  batch += NfnlMsg(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq++, AF_UNSPEC, NFNL_SUBSYS_NFTABLES).Done();

  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  // An error answer carries the failed message's header, not its payload.
  const int one = 1;
  (void)::setsockopt(fd.get(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  const std::string what = "nftables batch on table " + table;
  if (batch.size() > 64 * 1024) {
    // The batch goes in one datagram (one transaction): make room for it.
    int size = static_cast<int>(batch.size() + 4096);
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) != 0)
      (void)::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), batch, what));
  // The kernel runs the batch while sendto() is in progress: every answer
  // is queued by the time it returns.
  int first_err = 0;
  bool overrun = false;
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // Answers were lost: only failed messages answer (besides the last),
      // so the batch failed; the answers still queued name the first error.
      if (errno == ENOBUFS) {
        overrun = true;
        continue;
      }
      return NfnlError(what, errno);
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<size_t>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      if (e->error != 0 && first_err == 0) first_err = -e->error;
    }
  }
  if (keep) *keep = std::move(fd);
  if (first_err != 0) return NfnlError(what, first_err);
  if (overrun) return NfnlError(what + ": the kernel's answers overflowed", ENOBUFS);
  return Status::Ok();
}

Result<bool> NftTableExists(NftFamily family, const std::string& table) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  NfnlMsg m(NftType(NFT_MSG_GETTABLE), NLM_F_REQUEST | NLM_F_ACK, 1, static_cast<uint8_t>(family));
  m.Str(NFTA_TABLE_NAME, table);
  const std::string what = "get nftables table " + table;
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), m.Done(), what));
  char buf[8192];
  while (true) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return NfnlError(what, errno);
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<size_t>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) return true;  // the table itself
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      if (e->error == 0) return true;
      if (e->error == -ENOENT) return false;
      return NfnlError(what, -e->error);
    }
  }
}

Result<bool> NftElementExists(NftFamily family, const std::string& table, const std::string& set,
                              const std::string& key) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  NfnlMsg m(NftType(NFT_MSG_GETSETELEM), NLM_F_REQUEST | NLM_F_ACK, 1, static_cast<uint8_t>(family));
  m.Str(NFTA_SET_ELEM_LIST_TABLE, table);
  m.Str(NFTA_SET_ELEM_LIST_SET, set);
  size_t list = m.Begin(NFTA_SET_ELEM_LIST_ELEMENTS);
  size_t el = m.Begin(NFTA_LIST_ELEM);
  PutData(m, NFTA_SET_ELEM_KEY, key);
  m.End(el);
  m.End(list);
  const std::string what = "get an element of nftables set " + table + "/" + set;
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), m.Done(), what));
  // The element (a NEWSETELEM message), then the ack; or only an error.
  bool found = false;
  char buf[8192];
  while (true) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return NfnlError(what, errno);
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<size_t>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) {
        found = true;
        continue;
      }
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      if (e->error == 0) return found;
      if (e->error == -ENOENT) return false;
      return NfnlError(what, -e->error);
    }
  }
}

namespace {

Result<std::vector<NftElement>> DumpElements(NftFamily family, const std::string& table, const std::string& set) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  NfnlMsg m(NftType(NFT_MSG_GETSETELEM), NLM_F_REQUEST | NLM_F_DUMP, 1, static_cast<uint8_t>(family));
  m.Str(NFTA_SET_ELEM_LIST_TABLE, table);
  m.Str(NFTA_SET_ELEM_LIST_SET, set);
  const std::string what = "dump nftables set " + table + "/" + set;
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), m.Done(), what));
  std::vector<NftElement> out;
  Status st = NfnlReadDump(fd.get(), what, [&](const char* p, size_t len) {
    ForEachNfAttr(p, len, [&](uint16_t t, const char* d, size_t l) {
      if (t != NFTA_SET_ELEM_LIST_ELEMENTS) return;
      ForEachNfAttr(d, l, [&](uint16_t t2, const char* d2, size_t l2) {
        if (t2 != NFTA_LIST_ELEM) return;
        NftElement e;
        e.set = set;
        ForEachNfAttr(d2, l2, [&](uint16_t t3, const char* d3, size_t l3) {
          if (t3 == NFTA_SET_ELEM_KEY) e.key = DataValue(d3, l3);
          if (t3 == NFTA_SET_ELEM_KEY_END) e.key_end = DataValue(d3, l3);
          if (t3 == NFTA_SET_ELEM_DATA) e.data = DataValue(d3, l3);
          if (t3 == NFTA_SET_ELEM_FLAGS && l3 == 4) {
            uint32_t be;
            std::memcpy(&be, d3, sizeof be);
            e.flags = ntohl(be);
          }
        });
        out.push_back(std::move(e));
      });
    });
  });
  if (!st.ok() && st.sys_errno() == ENOENT) return std::vector<NftElement>{};
  if (!st.ok()) return st;
  return out;
}

}  // namespace

Result<std::vector<NftElement>> NftElements(NftFamily family, const std::string& table, const std::string& set) {
  return RetryInterruptedNftDump<std::vector<NftElement>>([&] { return DumpElements(family, table, set); });
}

}  // namespace weft::sys
