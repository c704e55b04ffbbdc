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

#include "sys/nft_kernel.h"


namespace weft::sys {

namespace {

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

namespace {

nft::Expr ToExpr(const NftExpr& e) {
  switch (e.kind) {
    case NftExpr::kMeta:
      return nft::Meta{.key = e.key, .dreg = NFT_REG_1};
    case NftExpr::kPayload:
      return nft::Payload{.base = e.base, .offset = e.offset, .len = e.len, .dreg = NFT_REG_1};
    case NftExpr::kCmp:
      return nft::Cmp{.op = e.equal ? NFT_CMP_EQ : NFT_CMP_NEQ, .data = e.data, .sreg = NFT_REG_1};
    case NftExpr::kVerdict:
      break;
  }
  return nft::Verdict{.code = e.verdict, .chain = e.chain};
}

nft::Element ToElement(const NftElement& e, bool add) {
  return {.key = e.key, .key_end = e.key_end, .data = add ? e.data : "", .flags = e.flags};
}

bool IsElementOp(NftChange::Op op) {
  return op == NftChange::kAddElement || op == NftChange::kDeleteElement || op == NftChange::kDestroyElement;
}

}  // namespace

nft::Transaction NftTransaction(NftFamily family, const std::string& table, const std::vector<NftChange>& changes) {
  nft::Transaction tx(family, table);
  for (size_t i = 0; i < changes.size();) {
    const NftChange& c = changes[i];
    if (IsElementOp(c.op)) {
      // One op per run of changes to the same set with the same op.
      const bool add = c.op == NftChange::kAddElement;
      nft::Elements es{.set = c.elem.set, .elems = {}};
      for (; i < changes.size() && changes[i].op == c.op && changes[i].elem.set == c.elem.set; ++i)
        es.elems.push_back(ToElement(changes[i].elem, add));
      if (add) tx.Add(std::move(es));
      else if (c.op == NftChange::kDestroyElement) tx.Destroy(std::move(es));
      else tx.Delete(std::move(es));
      continue;
    }
    ++i;
    switch (c.op) {
      case NftChange::kDeleteTable:
        tx.Delete(nft::Table{table});
        break;
      case NftChange::kAddIngressChain:
        tx.Add(nft::Chain{c.chain, nft::Hook{.num = NF_NETDEV_INGRESS, .priority = c.priority, .type = "filter",
                                             .device = c.device, .policy = NF_ACCEPT}});
        break;
      case NftChange::kFlushChain:
        tx.Flush(nft::Chain{c.chain, std::nullopt});
        break;
      case NftChange::kAddRule: {
        nft::Rule r{.chain = c.chain, .exprs = {}, .comment = "", .handle = 0};
        for (const auto& e : c.rule) r.exprs.push_back(ToExpr(e));
        tx.Add(std::move(r));
        break;
      }
      case NftChange::kDeleteChain:
        tx.Delete(nft::Chain{c.chain, std::nullopt});
        break;
      case NftChange::kDestroyChain:
        tx.Destroy(nft::Chain{c.chain, std::nullopt});
        break;
      default:
        break;
    }
  }
  return tx;
}

Status NftApply(NftFamily family, const std::string& table, const std::vector<NftChange>& changes,
                UniqueFd* keep) {
  if (changes.empty()) return Status::Ok();
  return nft::Kernel().Apply(NftTransaction(family, table, changes), keep);
}

Result<bool> NftTableExists(NftFamily family, const std::string& table) {
  return nft::Kernel().TableExists(family, table);
}

Result<bool> NftElementExists(NftFamily family, const std::string& table, const std::string& set,
                              const std::string& key) {
  return nft::Kernel().HasElement(family, table, set, key);
}

Result<std::vector<NftElement>> NftElements(NftFamily family, const std::string& table, const std::string& set) {
  auto elems = nft::Kernel().SetElements(family, table, set);
  if (!elems.ok() && elems.status().sys_errno() == ENOENT) return std::vector<NftElement>{};
  if (!elems.ok()) return elems.status();
  std::vector<NftElement> out;
  out.reserve(elems->size());
  for (auto& e : *elems)
    out.push_back({.set = set, .key = std::move(e.key), .key_end = std::move(e.key_end), .data = std::move(e.data),
                   .flags = e.flags});
  return out;
}

}  // namespace weft::sys
