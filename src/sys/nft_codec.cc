#include "sys/nft_codec.h"

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "sys/nft_nftnl.h"
#include "sys/nft_render.h"

namespace weft::sys::nft {
namespace {

// NFT_MSG_DESTROY* (Linux 6.3); Debian 12's UAPI headers predate them.
constexpr uint16_t kMsgDestroyTable = 26, kMsgDestroyChain = 27, kMsgDestroyRule = 28, kMsgDestroySet = 29,
                   kMsgDestroySetElem = 30, kMsgDestroyObj = 31;
// A message's buffer: libnftnl writes without bounds, so every message is
// built in one at least this large. Elements go in chunks that fit it.
constexpr size_t kMsgBuf = 1 << 16;
constexpr size_t kElemsPerMsg = 64;  // < kMsgBuf / the largest element (key, end, data: 64 B each; a chain name)

Status Bad(const std::string& what) {
  return Status::Error(Reason::kInvalidArgument, Domain::kFirewall, "nftables: " + what);
}
Status Malformed(const std::string& what) {
  return Status::Error(Reason::kMalformed, Domain::kFirewall, "nftables dump: " + what);
}

// One message: header, then `payload(nlh)`.
// Built in one scratch buffer per thread, never cleared: a buffer made and
// zeroed per message cost the plugin page faults and a 64 KiB memset each.
// Attribute padding keeps what the buffer held (libmnl 1.0.4 does not
// clear it); the kernel reads attributes by their length, and AsDumped
// gives the one string libnftnl writes without its NUL (objref's name) the
// NUL a dump carries.
template <typename F>
std::string Build(uint16_t type, Family family, uint16_t flags, uint32_t seq, F payload) {
  thread_local std::unique_ptr<char[]> scratch(new char[kMsgBuf]);
  nlmsghdr* nlh = nftnl_nlmsg_build_hdr(scratch.get(), type, static_cast<uint16_t>(family), flags, seq);
  payload(nlh);
  return std::string(scratch.get(), nlh->nlmsg_len);
}

// Only a jump or goto carries a chain (libnftnl mis-parses any other
// verdict with one, and the kernel never sends it).
bool TakesChain(const Verdict& v) { return (v.code == NFT_JUMP || v.code == NFT_GOTO) && !v.chain.empty(); }

void SetData(nftnl_expr* e, uint16_t attr, const std::string& d) { nftnl_expr_set(e, attr, d.data(), d.size()); }

// `counter name "x"`, `limit name "x"`: a reference to a named object.
nftnl_expr* ObjRef(uint32_t type, const std::string& name) {
  nftnl_expr* e = nftnl_expr_alloc("objref");
  nftnl_expr_set_u32(e, NFTNL_EXPR_OBJREF_IMM_TYPE, type);
  nftnl_expr_set_str(e, NFTNL_EXPR_OBJREF_IMM_NAME, name.c_str());
  return e;
}

// The anonymous sets a transaction adds, by its name for them: their id
// in the batch (what the rule and the elements refer to).
using AnonIds = std::map<std::string, uint32_t>;
constexpr char kAnonName[] = "__set%d";

nftnl_expr* EncodeExpr(const Expr& x, const AnonIds& anon) {
  nftnl_expr* e = nullptr;
  if (const auto* m = std::get_if<Meta>(&x)) {
    e = nftnl_expr_alloc("meta");
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, m->key);
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, m->dreg);
  } else if (const auto* p = std::get_if<Payload>(&x)) {
    e = nftnl_expr_alloc("payload");
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, p->dreg);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, p->base);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, p->offset);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, p->len);
  } else if (const auto* c = std::get_if<Ct>(&x)) {
    e = nftnl_expr_alloc("ct");
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, c->key);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, c->dreg);
    if (c->dir) nftnl_expr_set_u8(e, NFTNL_EXPR_CT_DIR, *c->dir);
  } else if (const auto* c = std::get_if<Cmp>(&x)) {
    e = nftnl_expr_alloc("cmp");
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, c->sreg);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, c->op);
    SetData(e, NFTNL_EXPR_CMP_DATA, c->data);
  } else if (const auto* b = std::get_if<Bitwise>(&x)) {
    e = nftnl_expr_alloc("bitwise");
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, b->sreg);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, b->dreg);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, b->len);
    SetData(e, NFTNL_EXPR_BITWISE_MASK, b->mask);
    SetData(e, NFTNL_EXPR_BITWISE_XOR, b->xor_);
  } else if (const auto* l = std::get_if<Lookup>(&x)) {
    e = nftnl_expr_alloc("lookup");
    if (auto id = anon.find(l->set); id != anon.end()) {
      nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, kAnonName);
      nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, id->second);
    } else {
      nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, l->set.c_str());
    }
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, l->sreg);
    if (l->dreg) nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, *l->dreg);
    if (l->invert) nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
  } else if (const auto* i = std::get_if<Immediate>(&x)) {
    e = nftnl_expr_alloc("immediate");
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, i->dreg);
    SetData(e, NFTNL_EXPR_IMM_DATA, i->data);
  } else if (const auto* v = std::get_if<Verdict>(&x)) {
    e = nftnl_expr_alloc("immediate");
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, static_cast<uint32_t>(v->code));
    if (TakesChain(*v)) nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, v->chain.c_str());
  } else if (const auto* k = std::get_if<Counter>(&x)) {
    e = nftnl_expr_alloc("counter");
    nftnl_expr_set_u64(e, NFTNL_EXPR_CTR_PACKETS, k->packets);
    nftnl_expr_set_u64(e, NFTNL_EXPR_CTR_BYTES, k->bytes);
  } else if (const auto* r = std::get_if<CounterRef>(&x)) {
    e = ObjRef(NFT_OBJECT_COUNTER, r->name);
  } else if (const auto* f = std::get_if<Fib>(&x)) {
    e = nftnl_expr_alloc("fib");
    nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_FLAGS, f->flags);
    nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_RESULT, f->result);
    nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_DREG, f->dreg);
  } else if (const auto* m = std::get_if<MetaSet>(&x)) {
    e = nftnl_expr_alloc("meta");
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, m->key);
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_SREG, m->sreg);
  } else if (const auto* r = std::get_if<LimitRef>(&x)) {
    e = ObjRef(NFT_OBJECT_LIMIT, r->name);
  } else if (const auto* g = std::get_if<Log>(&x)) {
    e = nftnl_expr_alloc("log");
    if (!g->prefix.empty()) nftnl_expr_set_str(e, NFTNL_EXPR_LOG_PREFIX, g->prefix.c_str());
    if (g->group) {
      nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_GROUP, *g->group);
      if (g->snaplen) nftnl_expr_set_u32(e, NFTNL_EXPR_LOG_SNAPLEN, g->snaplen);
      if (g->qthreshold) nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_QTHRESHOLD, g->qthreshold);
    }
  } else if (const auto* n = std::get_if<Nat>(&x)) {
    if (n->masq) {
      e = nftnl_expr_alloc("masq");
      if (n->flags) nftnl_expr_set_u32(e, NFTNL_EXPR_MASQ_FLAGS, n->flags);
      if (n->reg_proto) {
        nftnl_expr_set_u32(e, NFTNL_EXPR_MASQ_REG_PROTO_MIN, n->reg_proto);
        nftnl_expr_set_u32(e, NFTNL_EXPR_MASQ_REG_PROTO_MAX, n->reg_proto);
      }
    } else {
      e = nftnl_expr_alloc("nat");
      nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_TYPE, n->type);
      nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_FAMILY, n->family);
      // One address and port (max = min), as nft writes them.
      if (n->reg_addr) {
        nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_ADDR_MIN, n->reg_addr);
        nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_ADDR_MAX, n->reg_addr);
      }
      if (n->reg_proto) {
        nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_PROTO_MIN, n->reg_proto);
        nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_PROTO_MAX, n->reg_proto);
      }
      if (n->flags) nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_FLAGS, n->flags);
    }
  } else if (const auto* g = std::get_if<Numgen>(&x)) {
    e = nftnl_expr_alloc("numgen");
    nftnl_expr_set_u32(e, NFTNL_EXPR_NG_DREG, g->dreg);
    nftnl_expr_set_u32(e, NFTNL_EXPR_NG_MODULUS, g->modulus);
    nftnl_expr_set_u32(e, NFTNL_EXPR_NG_TYPE, g->type);
    if (g->offset) nftnl_expr_set_u32(e, NFTNL_EXPR_NG_OFFSET, g->offset);
  } else if (const auto* l = std::get_if<Limit>(&x)) {
    e = nftnl_expr_alloc("limit");
    nftnl_expr_set_u64(e, NFTNL_EXPR_LIMIT_RATE, l->rate);
    nftnl_expr_set_u64(e, NFTNL_EXPR_LIMIT_UNIT, l->unit);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_BURST, l->burst);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_TYPE, l->type);
    if (l->invert) nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_FLAGS, NFT_LIMIT_F_INV);
  } else if (const auto* r = std::get_if<Reject>(&x)) {
    e = nftnl_expr_alloc("reject");
    nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE, r->type);
    // The kernel takes (and dumps) a code only with the ICMP types.
    if (r->type != NFT_REJECT_TCP_RST) nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE, r->code);
  } else if (const auto* d = std::get_if<Dynset>(&x)) {
    e = nftnl_expr_alloc("dynset");
    nftnl_expr_set_str(e, NFTNL_EXPR_DYNSET_SET_NAME, d->set.c_str());
    nftnl_expr_set_u32(e, NFTNL_EXPR_DYNSET_OP, d->op);
    nftnl_expr_set_u32(e, NFTNL_EXPR_DYNSET_SREG_KEY, d->sreg_key);
    if (d->timeout_ms) nftnl_expr_set_u64(e, NFTNL_EXPR_DYNSET_TIMEOUT, d->timeout_ms);
  }
  return e;
}

std::string GetData(const nftnl_expr* e, uint16_t attr) {
  uint32_t len = 0;
  const void* d = nftnl_expr_get(e, attr, &len);
  return d ? std::string(static_cast<const char*>(d), len) : std::string();
}
uint32_t U32(const nftnl_expr* e, uint16_t attr) {
  return nftnl_expr_is_set(e, attr) ? nftnl_expr_get_u32(e, attr) : 0;
}
std::string Str(const nftnl_expr* e, uint16_t attr) {
  const char* s = nftnl_expr_is_set(e, attr) ? nftnl_expr_get_str(e, attr) : nullptr;
  return s ? s : "";
}

// The typed expression of `e`, or nullopt for a kind this layer has no type for.
std::optional<Expr> DecodeExpr(const nftnl_expr* e) {
  const char* cname = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
  const std::string name = cname ? cname : "";
  if (name == "meta") {
    if (!nftnl_expr_is_set(e, NFTNL_EXPR_META_DREG)) {
      if (!nftnl_expr_is_set(e, NFTNL_EXPR_META_SREG)) return std::nullopt;
      return MetaSet{U32(e, NFTNL_EXPR_META_KEY), U32(e, NFTNL_EXPR_META_SREG)};
    }
    return Meta{U32(e, NFTNL_EXPR_META_KEY), U32(e, NFTNL_EXPR_META_DREG)};
  }
  if (name == "payload") {
    if (nftnl_expr_is_set(e, NFTNL_EXPR_PAYLOAD_SREG)) return std::nullopt;  // a payload write
    return Payload{U32(e, NFTNL_EXPR_PAYLOAD_BASE), U32(e, NFTNL_EXPR_PAYLOAD_OFFSET), U32(e, NFTNL_EXPR_PAYLOAD_LEN),
                   U32(e, NFTNL_EXPR_PAYLOAD_DREG)};
  }
  if (name == "ct") {
    if (!nftnl_expr_is_set(e, NFTNL_EXPR_CT_DREG)) return std::nullopt;
    Ct c{U32(e, NFTNL_EXPR_CT_KEY), U32(e, NFTNL_EXPR_CT_DREG), std::nullopt};
    if (nftnl_expr_is_set(e, NFTNL_EXPR_CT_DIR)) c.dir = nftnl_expr_get_u8(e, NFTNL_EXPR_CT_DIR);
    return c;
  }
  if (name == "cmp") return Cmp{U32(e, NFTNL_EXPR_CMP_OP), GetData(e, NFTNL_EXPR_CMP_DATA), U32(e, NFTNL_EXPR_CMP_SREG)};
  if (name == "bitwise") {
    if (U32(e, NFTNL_EXPR_BITWISE_OP) != NFT_BITWISE_BOOL) return std::nullopt;  // shifts
    return Bitwise{U32(e, NFTNL_EXPR_BITWISE_SREG), U32(e, NFTNL_EXPR_BITWISE_DREG), U32(e, NFTNL_EXPR_BITWISE_LEN),
                   GetData(e, NFTNL_EXPR_BITWISE_MASK), GetData(e, NFTNL_EXPR_BITWISE_XOR)};
  }
  if (name == "lookup") {
    Lookup l{Str(e, NFTNL_EXPR_LOOKUP_SET), U32(e, NFTNL_EXPR_LOOKUP_SREG), std::nullopt,
             (U32(e, NFTNL_EXPR_LOOKUP_FLAGS) & NFT_LOOKUP_F_INV) != 0};
    if (nftnl_expr_is_set(e, NFTNL_EXPR_LOOKUP_DREG)) l.dreg = nftnl_expr_get_u32(e, NFTNL_EXPR_LOOKUP_DREG);
    return l;
  }
  if (name == "immediate") {
    if (nftnl_expr_is_set(e, NFTNL_EXPR_IMM_VERDICT))
      return Verdict{static_cast<int32_t>(nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_VERDICT)), Str(e, NFTNL_EXPR_IMM_CHAIN)};
    return Immediate{U32(e, NFTNL_EXPR_IMM_DREG), GetData(e, NFTNL_EXPR_IMM_DATA)};
  }
  if (name == "counter") {
    Counter c;
    if (nftnl_expr_is_set(e, NFTNL_EXPR_CTR_PACKETS)) c.packets = nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_PACKETS);
    if (nftnl_expr_is_set(e, NFTNL_EXPR_CTR_BYTES)) c.bytes = nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_BYTES);
    return c;
  }
  if (name == "objref") {
    if (U32(e, NFTNL_EXPR_OBJREF_IMM_TYPE) == NFT_OBJECT_COUNTER) return CounterRef{Str(e, NFTNL_EXPR_OBJREF_IMM_NAME)};
    if (U32(e, NFTNL_EXPR_OBJREF_IMM_TYPE) == NFT_OBJECT_LIMIT) return LimitRef{Str(e, NFTNL_EXPR_OBJREF_IMM_NAME)};
    return std::nullopt;
  }
  if (name == "log") {
    Log g{Str(e, NFTNL_EXPR_LOG_PREFIX), std::nullopt, 0, 0};
    if (nftnl_expr_is_set(e, NFTNL_EXPR_LOG_GROUP)) {
      g.group = nftnl_expr_get_u16(e, NFTNL_EXPR_LOG_GROUP);
      g.snaplen = U32(e, NFTNL_EXPR_LOG_SNAPLEN);
      if (nftnl_expr_is_set(e, NFTNL_EXPR_LOG_QTHRESHOLD)) g.qthreshold = nftnl_expr_get_u16(e, NFTNL_EXPR_LOG_QTHRESHOLD);
    }
    return g;
  }
  if (name == "masq") {
    Nat n;
    n.masq = true;
    n.flags = U32(e, NFTNL_EXPR_MASQ_FLAGS);
    n.reg_proto = U32(e, NFTNL_EXPR_MASQ_REG_PROTO_MIN);
    return n;
  }
  if (name == "nat") {
    Nat n;
    n.type = U32(e, NFTNL_EXPR_NAT_TYPE);
    n.family = U32(e, NFTNL_EXPR_NAT_FAMILY);
    n.reg_addr = U32(e, NFTNL_EXPR_NAT_REG_ADDR_MIN);
    n.reg_proto = U32(e, NFTNL_EXPR_NAT_REG_PROTO_MIN);
    // The kernel adds these two itself when the registers are given.
    n.flags = U32(e, NFTNL_EXPR_NAT_FLAGS) & ~(NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED);
    return n;
  }
  if (name == "fib") return Fib{U32(e, NFTNL_EXPR_FIB_FLAGS), U32(e, NFTNL_EXPR_FIB_RESULT), U32(e, NFTNL_EXPR_FIB_DREG)};
  if (name == "numgen")
    return Numgen{U32(e, NFTNL_EXPR_NG_TYPE), U32(e, NFTNL_EXPR_NG_MODULUS), U32(e, NFTNL_EXPR_NG_OFFSET),
                  U32(e, NFTNL_EXPR_NG_DREG)};
  if (name == "limit") {
    Limit l;
    if (nftnl_expr_is_set(e, NFTNL_EXPR_LIMIT_RATE)) l.rate = nftnl_expr_get_u64(e, NFTNL_EXPR_LIMIT_RATE);
    if (nftnl_expr_is_set(e, NFTNL_EXPR_LIMIT_UNIT)) l.unit = nftnl_expr_get_u64(e, NFTNL_EXPR_LIMIT_UNIT);
    l.burst = U32(e, NFTNL_EXPR_LIMIT_BURST);
    l.type = U32(e, NFTNL_EXPR_LIMIT_TYPE);
    l.invert = (U32(e, NFTNL_EXPR_LIMIT_FLAGS) & NFT_LIMIT_F_INV) != 0;
    return l;
  }
  if (name == "reject") {
    Reject r{U32(e, NFTNL_EXPR_REJECT_TYPE), 0};
    if (nftnl_expr_is_set(e, NFTNL_EXPR_REJECT_CODE)) r.code = nftnl_expr_get_u8(e, NFTNL_EXPR_REJECT_CODE);
    return r;
  }
  if (name == "dynset") {
    // A dynset with expressions of its own (`add @s { ip saddr counter }`) or data (a map) is none of ours.
    if (nftnl_expr_is_set(e, NFTNL_EXPR_DYNSET_SREG_DATA) || nftnl_expr_is_set(e, NFTNL_EXPR_DYNSET_EXPR))
      return std::nullopt;
    Dynset d{U32(e, NFTNL_EXPR_DYNSET_OP), Str(e, NFTNL_EXPR_DYNSET_SET_NAME), U32(e, NFTNL_EXPR_DYNSET_SREG_KEY), 0};
    if (nftnl_expr_is_set(e, NFTNL_EXPR_DYNSET_TIMEOUT)) d.timeout_ms = nftnl_expr_get_u64(e, NFTNL_EXPR_DYNSET_TIMEOUT);
    return d;
  }
  return std::nullopt;
}

// The message type and flags of `verb` on an object of kind new_type (its
// delete and destroy types beside).
struct Types {
  uint16_t add, del, destroy;
};

uint16_t Flags(Verb v, bool append = false) {
  uint16_t f = NLM_F_REQUEST;
  if (v == Verb::kAdd || v == Verb::kCreate) f |= NLM_F_CREATE;
  if (v == Verb::kCreate) f |= NLM_F_EXCL;
  if (append && (v == Verb::kAdd || v == Verb::kCreate)) f |= NLM_F_APPEND;
  return f;
}

uint16_t TypeOf(Verb v, Types t) {
  if (v == Verb::kDelete) return t.del;
  if (v == Verb::kDestroy) return t.destroy;
  return t.add;
}

TablePtr MakeTable(const std::string& name) {
  TablePtr t(nftnl_table_alloc());
  nftnl_table_set_str(t.get(), NFTNL_TABLE_NAME, name.c_str());
  return t;
}

ChainPtr MakeChain(const std::string& table, const Chain& c) {
  ChainPtr ch(nftnl_chain_alloc());
  nftnl_chain_set_str(ch.get(), NFTNL_CHAIN_TABLE, table.c_str());
  nftnl_chain_set_str(ch.get(), NFTNL_CHAIN_NAME, c.name.c_str());
  if (c.hook) {
    nftnl_chain_set_u32(ch.get(), NFTNL_CHAIN_HOOKNUM, c.hook->num);
    nftnl_chain_set_s32(ch.get(), NFTNL_CHAIN_PRIO, c.hook->priority);
    nftnl_chain_set_str(ch.get(), NFTNL_CHAIN_TYPE, c.hook->type.c_str());
    nftnl_chain_set_u32(ch.get(), NFTNL_CHAIN_POLICY, c.hook->policy);
    if (!c.hook->device.empty()) nftnl_chain_set_str(ch.get(), NFTNL_CHAIN_DEV, c.hook->device.c_str());
  }
  return ch;
}

Result<RulePtr> MakeRule(const std::string& table, const Rule& r, bool with_exprs, const AnonIds& anon) {
  RulePtr rule(nftnl_rule_alloc());
  nftnl_rule_set_str(rule.get(), NFTNL_RULE_TABLE, table.c_str());
  if (!r.chain.empty()) nftnl_rule_set_str(rule.get(), NFTNL_RULE_CHAIN, r.chain.c_str());
  if (r.handle) nftnl_rule_set_u64(rule.get(), NFTNL_RULE_HANDLE, r.handle);
  if (!with_exprs) return rule;
  for (const Expr& x : r.exprs) nftnl_rule_add_expr(rule.get(), EncodeExpr(x, anon));
  if (!r.comment.empty()) {
    UdataPtr ud(nftnl_udata_buf_alloc(NFT_USERDATA_MAXLEN));
    if (!nftnl_udata_put_strz(ud.get(), NFTNL_UDATA_RULE_COMMENT, r.comment.c_str()))
      return Bad("rule comment too long (" + std::to_string(r.comment.size()) + " bytes)");
    nftnl_rule_set_data(rule.get(), NFTNL_RULE_USERDATA, nftnl_udata_buf_data(ud.get()), nftnl_udata_buf_len(ud.get()));
  }
  return rule;
}

// `id`: the set's id within the batch (NFTA_SET_ID, which the kernel
// requires of a new set).
SetPtr MakeSet(const std::string& table, const Set& s, bool full, uint32_t id = 0) {
  SetPtr set(nftnl_set_alloc());
  nftnl_set_set_str(set.get(), NFTNL_SET_TABLE, table.c_str());
  const bool anonymous = full && (s.flags & NFT_SET_ANONYMOUS);
  nftnl_set_set_str(set.get(), NFTNL_SET_NAME, anonymous ? kAnonName : s.name.c_str());
  if (!full) return set;
  nftnl_set_set_u32(set.get(), NFTNL_SET_ID, id);
  nftnl_set_set_u32(set.get(), NFTNL_SET_FLAGS, s.flags);
  nftnl_set_set_u32(set.get(), NFTNL_SET_KEY_TYPE, s.key_type);
  nftnl_set_set_u32(set.get(), NFTNL_SET_KEY_LEN, s.key_len);
  if (s.flags & NFT_SET_MAP) {
    // A verdict map's data type is the kernel's NFT_DATA_VERDICT on the wire.
    nftnl_set_set_u32(set.get(), NFTNL_SET_DATA_TYPE, s.data_type == kTypeVerdict ? NFT_DATA_VERDICT : s.data_type);
    nftnl_set_set_u32(set.get(), NFTNL_SET_DATA_LEN, s.data_len);
  }
  if (s.timeout_ms) nftnl_set_set_u64(set.get(), NFTNL_SET_TIMEOUT, s.timeout_ms);
  if (!s.userdata.empty())
    nftnl_set_set_data(set.get(), NFTNL_SET_USERDATA, s.userdata.data(), static_cast<uint32_t>(s.userdata.size()));
  if (!s.fields.empty()) {
    uint8_t lens[NFT_REG32_COUNT] = {};
    for (size_t i = 0; i < s.fields.size() && i < NFT_REG32_COUNT; ++i) lens[i] = static_cast<uint8_t>(s.fields[i]);
    nftnl_set_set_data(set.get(), NFTNL_SET_DESC_CONCAT, lens,
                       static_cast<uint32_t>(std::min<size_t>(s.fields.size(), NFT_REG32_COUNT)));
  }
  return set;
}

void AddElem(nftnl_set* set, const Element& el) {
  nftnl_set_elem* e = nftnl_set_elem_alloc();
  if (!el.key.empty()) nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, el.key.data(), el.key.size());
  if (!el.key_end.empty()) nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY_END, el.key_end.data(), el.key_end.size());
  if (!el.data.empty()) nftnl_set_elem_set(e, NFTNL_SET_ELEM_DATA, el.data.data(), el.data.size());
  if (el.verdict) {
    nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, static_cast<uint32_t>(el.verdict->code));
    if (TakesChain(*el.verdict)) nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, el.verdict->chain.c_str());
  }
  if (el.flags) nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_FLAGS, el.flags);
  if (el.timeout_ms) nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, el.timeout_ms);
  nftnl_set_elem_add(set, e);
}

bool ChainMissing(const Verdict& v) { return (v.code == NFT_JUMP || v.code == NFT_GOTO) && v.chain.empty(); }

// What the kernel refuses (EINVAL) and libnftnl cannot read back: a jump
// without its chain, data of no bytes, a bitwise without mask or length.
Status CheckExpr(const Expr& x) {
  if (const auto* v = std::get_if<Verdict>(&x); v && ChainMissing(*v)) return Bad("a jump or goto without a chain");
  if (const auto* c = std::get_if<Cmp>(&x); c && c->data.empty()) return Bad("a comparison with no data");
  if (const auto* i = std::get_if<Immediate>(&x); i && i->data.empty()) return Bad("an immediate with no data");
  if (const auto* b = std::get_if<Bitwise>(&x); b && (b->mask.empty() || b->mask.size() != b->xor_.size() || b->len == 0))
    return Bad("a bitwise without mask and xor of its length");
  return Status::Ok();
}

// The messages of one op.
Status EncodeOp(const Transaction& tx, const Op& op, uint32_t* seq, AnonIds* anon, std::vector<std::string>* out) {
  const Family fam = tx.family();
  const std::string& table = tx.table();
  const Verb v = op.verb;
  if (const auto* t = std::get_if<Table>(&op.object)) {
    if (t->name != table) return Bad("table " + t->name + " in a transaction of table " + table);
    if (v == Verb::kFlush) {
      RulePtr r(nftnl_rule_alloc());
      nftnl_rule_set_str(r.get(), NFTNL_RULE_TABLE, table.c_str());
      out->push_back(Build(NFT_MSG_DELRULE, fam, NLM_F_REQUEST, (*seq)++,
                           [&](nlmsghdr* n) { nftnl_rule_nlmsg_build_payload(n, r.get()); }));
      return Status::Ok();
    }
    TablePtr tp = MakeTable(table);
    out->push_back(Build(TypeOf(v, {NFT_MSG_NEWTABLE, NFT_MSG_DELTABLE, kMsgDestroyTable}), fam, Flags(v), (*seq)++,
                         [&](nlmsghdr* n) { nftnl_table_nlmsg_build_payload(n, tp.get()); }));
    return Status::Ok();
  }
  if (const auto* c = std::get_if<Chain>(&op.object)) {
    if (c->name.empty()) return Bad("a chain without a name");
    if (v == Verb::kFlush) {
      RulePtr r(nftnl_rule_alloc());
      nftnl_rule_set_str(r.get(), NFTNL_RULE_TABLE, table.c_str());
      nftnl_rule_set_str(r.get(), NFTNL_RULE_CHAIN, c->name.c_str());
      out->push_back(Build(NFT_MSG_DELRULE, fam, NLM_F_REQUEST, (*seq)++,
                           [&](nlmsghdr* n) { nftnl_rule_nlmsg_build_payload(n, r.get()); }));
      return Status::Ok();
    }
    Chain bare{c->name, std::nullopt};
    ChainPtr ch = MakeChain(table, v == Verb::kAdd || v == Verb::kCreate ? *c : bare);
    out->push_back(Build(TypeOf(v, {NFT_MSG_NEWCHAIN, NFT_MSG_DELCHAIN, kMsgDestroyChain}), fam, Flags(v), (*seq)++,
                         [&](nlmsghdr* n) { nftnl_chain_nlmsg_build_payload(n, ch.get()); }));
    return Status::Ok();
  }
  if (const auto* r = std::get_if<Rule>(&op.object)) {
    if (v == Verb::kFlush) return Bad("flush of a rule (flush its chain)");
    if (r->chain.empty()) return Bad("a rule without a chain");
    for (const Expr& x : r->exprs) WEFT_RETURN_IF_ERROR(CheckExpr(x));
    const bool add = v == Verb::kAdd || v == Verb::kCreate;
    if (!add && !r->handle) return Bad("delete of a rule without its handle");
    WEFT_ASSIGN_OR_RETURN(RulePtr rule, MakeRule(table, *r, add, *anon));
    out->push_back(Build(TypeOf(v, {NFT_MSG_NEWRULE, NFT_MSG_DELRULE, kMsgDestroyRule}), fam, Flags(v, true), (*seq)++,
                         [&](nlmsghdr* n) { nftnl_rule_nlmsg_build_payload(n, rule.get()); }));
    return Status::Ok();
  }
  if (const auto* s = std::get_if<Set>(&op.object)) {
    if (s->name.empty()) return Bad("a set without a name");
    if (v == Verb::kFlush) {
      SetPtr set = MakeSet(table, *s, false);
      out->push_back(Build(NFT_MSG_DELSETELEM, fam, NLM_F_REQUEST, (*seq)++,
                           [&](nlmsghdr* n) { nftnl_set_elems_nlmsg_build_payload(n, set.get()); }));
      return Status::Ok();
    }
    const bool add = v == Verb::kAdd || v == Verb::kCreate;
    if (s->flags & NFT_SET_ANONYMOUS) {
      if (!add) return Bad("delete of an anonymous set (it goes with its rule)");
      if (!IsAnonymousSetName(s->name)) return Bad("an anonymous set whose name does not start with __set");
      if (!(s->flags & NFT_SET_CONSTANT)) return Bad("an anonymous set that is not constant");
      (*anon)[s->name] = *seq;
    }
    SetPtr set = MakeSet(table, *s, add, *seq);
    out->push_back(Build(TypeOf(v, {NFT_MSG_NEWSET, NFT_MSG_DELSET, kMsgDestroySet}), fam, Flags(v), (*seq)++,
                         [&](nlmsghdr* n) { nftnl_set_nlmsg_build_payload(n, set.get()); }));
    return Status::Ok();
  }
  if (const auto* es = std::get_if<Elements>(&op.object)) {
    if (v == Verb::kFlush) return Bad("flush of elements (flush their set)");
    for (const Element& el : es->elems) {
      if (el.key.empty()) return Bad("an element without a key");
      if (el.verdict && ChainMissing(*el.verdict)) return Bad("a jump or goto without a chain");
    }
    for (size_t at = 0; at < es->elems.size(); at += kElemsPerMsg) {
      SetPtr set = MakeSet(table, Set{es->set}, false);
      if (auto id = anon->find(es->set); id != anon->end()) {
        nftnl_set_set_str(set.get(), NFTNL_SET_NAME, kAnonName);
        nftnl_set_set_u32(set.get(), NFTNL_SET_ID, id->second);
      }
      for (size_t i = at; i < es->elems.size() && i < at + kElemsPerMsg; ++i) AddElem(set.get(), es->elems[i]);
      out->push_back(Build(TypeOf(v, {NFT_MSG_NEWSETELEM, NFT_MSG_DELSETELEM, kMsgDestroySetElem}), fam, Flags(v),
                           (*seq)++, [&](nlmsghdr* n) { nftnl_set_elems_nlmsg_build_payload(n, set.get()); }));
    }
    return Status::Ok();
  }
  // Named objects: a counter or a limit, its state only when added.
  const auto* k = std::get_if<NamedCounter>(&op.object);
  const auto* l = std::get_if<NamedLimit>(&op.object);
  if (k || l) {
    if (v == Verb::kFlush) return Bad(k ? "flush of a counter" : "flush of a limit");
    const bool add = v == Verb::kAdd || v == Verb::kCreate;
    if (l && add && (l->rate == 0 || l->unit == 0)) return Bad("a limit without a rate");
    ObjPtr o(nftnl_obj_alloc());
    nftnl_obj_set_str(o.get(), NFTNL_OBJ_TABLE, table.c_str());
    nftnl_obj_set_str(o.get(), NFTNL_OBJ_NAME, (k ? k->name : l->name).c_str());
    nftnl_obj_set_u32(o.get(), NFTNL_OBJ_TYPE, k ? NFT_OBJECT_COUNTER : NFT_OBJECT_LIMIT);
    if (add && k) {
      nftnl_obj_set_u64(o.get(), NFTNL_OBJ_CTR_PKTS, k->packets);
      nftnl_obj_set_u64(o.get(), NFTNL_OBJ_CTR_BYTES, k->bytes);
    } else if (add) {
      nftnl_obj_set_u64(o.get(), NFTNL_OBJ_LIMIT_RATE, l->rate);
      nftnl_obj_set_u64(o.get(), NFTNL_OBJ_LIMIT_UNIT, l->unit);
      nftnl_obj_set_u32(o.get(), NFTNL_OBJ_LIMIT_BURST, l->burst);
      nftnl_obj_set_u32(o.get(), NFTNL_OBJ_LIMIT_TYPE, l->type);
      nftnl_obj_set_u32(o.get(), NFTNL_OBJ_LIMIT_FLAGS, l->invert ? NFT_LIMIT_F_INV : 0);
    }
    out->push_back(Build(TypeOf(v, {NFT_MSG_NEWOBJ, NFT_MSG_DELOBJ, kMsgDestroyObj}), fam, Flags(v), (*seq)++,
                         [&](nlmsghdr* n) { nftnl_obj_nlmsg_build_payload(n, o.get()); }));
    return Status::Ok();
  }
  return Bad("unknown object");
}

std::string RuleComment(const nftnl_rule* r) {
  if (!nftnl_rule_is_set(r, NFTNL_RULE_USERDATA)) return "";
  uint32_t len = 0;
  const void* d = nftnl_rule_get_data(r, NFTNL_RULE_USERDATA, &len);
  std::string comment;
  nftnl_udata_parse(
      d, len,
      [](const nftnl_udata* a, void* out) {
        if (nftnl_udata_type(a) == NFTNL_UDATA_RULE_COMMENT) {
          const char* s = static_cast<const char*>(nftnl_udata_get(a));
          const uint8_t n = nftnl_udata_len(a);
          std::string c(s, n);
          c.resize(c.find('\0') == std::string::npos ? c.size() : c.find('\0'));
          *static_cast<std::string*>(out) = c;
        }
        return 0;
      },
      &comment);
  return comment;
}

// An element's bytes attribute (the call before the length is read).
std::string ElemBytes(nftnl_set_elem* e, uint16_t attr) {
  if (!nftnl_set_elem_is_set(e, attr)) return "";
  uint32_t len = 0;
  const void* d = nftnl_set_elem_get(e, attr, &len);
  return d ? std::string(static_cast<const char*>(d), len) : "";
}

void Adopt(TableState* into, uint32_t family, const char* table) {
  if (into->table.name.empty() && table) {
    into->table.name = table;
    into->family = static_cast<Family>(family);
  }
}

}  // namespace

Result<std::vector<Message>> EncodeOps(const Transaction& tx, uint32_t first_seq) {
  std::vector<Message> msgs;
  uint32_t seq = first_seq;
  AnonIds anon;
  for (size_t i = 0; i < tx.ops().size(); ++i) {
    std::vector<std::string> bytes;
    Status st = EncodeOp(tx, tx.ops()[i], &seq, &anon, &bytes);
    if (!st.ok()) return st.WithMsg(st.msg() + " (" + DescribeOp(tx, i) + ")");
    for (auto& b : bytes) msgs.push_back({std::move(b), i});
  }
  return msgs;
}

std::string DescribeOp(const Transaction& tx, size_t i, const std::vector<Set>& known) {
  std::vector<Set> sets;
  for (size_t j = 0; j < i && j < tx.ops().size(); ++j)
    if (const auto* s = std::get_if<Set>(&tx.ops()[j].object)) sets.push_back(*s);
  sets.insert(sets.end(), known.begin(), known.end());
  return RenderOp(tx.family(), tx.table(), tx.ops()[i], sets);
}

namespace {
Status DecodeAligned(const nlmsghdr* nlh, TableState* into, bool rule_exprs);
}

Status DecodeMessage(const nlmsghdr* msg, TableState* into, bool rule_exprs) {
  if (msg->nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg))) return Malformed("message too short");
  // libnftnl reads the message in place and strdup()s string attributes
  // without checking they end in NUL (the kernel's always do): it gets an
  // aligned copy followed by zeros, so a malformed string ends there.
  std::vector<uint32_t> copy(msg->nlmsg_len / 4 + 2, 0);
  std::memcpy(copy.data(), msg, msg->nlmsg_len);
  return DecodeAligned(reinterpret_cast<const nlmsghdr*>(copy.data()), into, rule_exprs);
}

namespace {
// a table: only adopts its family and name
Status DecodeTable(const nlmsghdr* nlh, TableState* into) {
  TablePtr t(nftnl_table_alloc());
  if (nftnl_table_nlmsg_parse(nlh, t.get()) < 0 || !nftnl_table_is_set(t.get(), NFTNL_TABLE_NAME))
    return Malformed("table");
  Adopt(into, nftnl_table_get_u32(t.get(), NFTNL_TABLE_FAMILY), nftnl_table_get_str(t.get(), NFTNL_TABLE_NAME));
  return Status::Ok();
}

// a chain, with its hook when it is a base chain
Status DecodeChain(const nlmsghdr* nlh, TableState* into) {
  ChainPtr c(nftnl_chain_alloc());
  if (nftnl_chain_nlmsg_parse(nlh, c.get()) < 0 || !nftnl_chain_is_set(c.get(), NFTNL_CHAIN_NAME))
    return Malformed("chain");
  Adopt(into, nftnl_chain_get_u32(c.get(), NFTNL_CHAIN_FAMILY), nftnl_chain_get_str(c.get(), NFTNL_CHAIN_TABLE));
  Chain ch{nftnl_chain_get_str(c.get(), NFTNL_CHAIN_NAME), std::nullopt};
  if (nftnl_chain_is_set(c.get(), NFTNL_CHAIN_HOOKNUM)) {
    Hook h;
    h.num = nftnl_chain_get_u32(c.get(), NFTNL_CHAIN_HOOKNUM);
    if (nftnl_chain_is_set(c.get(), NFTNL_CHAIN_PRIO)) h.priority = nftnl_chain_get_s32(c.get(), NFTNL_CHAIN_PRIO);
    const char* ty = nftnl_chain_is_set(c.get(), NFTNL_CHAIN_TYPE) ? nftnl_chain_get_str(c.get(), NFTNL_CHAIN_TYPE)
                                                                   : nullptr;
    h.type = ty ? ty : "";
    if (nftnl_chain_is_set(c.get(), NFTNL_CHAIN_POLICY)) h.policy = nftnl_chain_get_u32(c.get(), NFTNL_CHAIN_POLICY);
    const char* dev = nftnl_chain_is_set(c.get(), NFTNL_CHAIN_DEV) ? nftnl_chain_get_str(c.get(), NFTNL_CHAIN_DEV)
                                                                   : nullptr;
    h.device = dev ? dev : "";
    ch.hook = h;
  }
  into->chains.push_back(std::move(ch));
  return Status::Ok();
}

// a rule and its expressions (unless !exprs: its chain, handle and comment
// only); an expression the layer does not model is an error
Status DecodeRule(const nlmsghdr* nlh, TableState* into, bool exprs) {
  RulePtr r(nftnl_rule_alloc());
  if (nftnl_rule_nlmsg_parse(nlh, r.get()) < 0 || !nftnl_rule_is_set(r.get(), NFTNL_RULE_CHAIN))
    return Malformed("rule");
  Adopt(into, nftnl_rule_get_u32(r.get(), NFTNL_RULE_FAMILY), nftnl_rule_get_str(r.get(), NFTNL_RULE_TABLE));
  Rule rule;
  rule.chain = nftnl_rule_get_str(r.get(), NFTNL_RULE_CHAIN);
  if (nftnl_rule_is_set(r.get(), NFTNL_RULE_HANDLE)) rule.handle = nftnl_rule_get_u64(r.get(), NFTNL_RULE_HANDLE);
  rule.comment = RuleComment(r.get());
  if (!exprs) {
    into->rules.push_back(std::move(rule));
    return Status::Ok();
  }
  struct Acc {
    std::vector<Expr>* exprs;
    std::string bad;
  } acc{&rule.exprs, ""};
  nftnl_expr_foreach(
      r.get(),
      [](nftnl_expr* e, void* p) {
        auto* a = static_cast<Acc*>(p);
        auto x = DecodeExpr(e);
        if (!x) {
          const char* n = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
          a->bad = n ? n : "?";
          return -1;
        }
        a->exprs->push_back(std::move(*x));
        return 0;
      },
      &acc);
  if (!acc.bad.empty()) return Malformed("rule in chain " + rule.chain + ": expression " + acc.bad + " not supported");
  into->rules.push_back(std::move(rule));
  return Status::Ok();
}

// a set or map: flags, key and data types, timeout, concatenated fields
Status DecodeSet(const nlmsghdr* nlh, TableState* into) {
  SetPtr s(nftnl_set_alloc());
  if (nftnl_set_nlmsg_parse(nlh, s.get()) < 0 || !nftnl_set_is_set(s.get(), NFTNL_SET_NAME)) return Malformed("set");
  Adopt(into, nftnl_set_get_u32(s.get(), NFTNL_SET_FAMILY), nftnl_set_get_str(s.get(), NFTNL_SET_TABLE));
  Set set;
  set.name = nftnl_set_get_str(s.get(), NFTNL_SET_NAME);
  auto u32 = [&](uint16_t a) { return nftnl_set_is_set(s.get(), a) ? nftnl_set_get_u32(s.get(), a) : 0u; };
  set.flags = u32(NFTNL_SET_FLAGS);
  set.key_type = u32(NFTNL_SET_KEY_TYPE);
  set.key_len = u32(NFTNL_SET_KEY_LEN);
  set.data_type = u32(NFTNL_SET_DATA_TYPE);
  set.data_len = u32(NFTNL_SET_DATA_LEN);
  if (set.data_type == NFT_DATA_VERDICT) {
    set.data_type = kTypeVerdict;
    set.data_len = 0;  // the kernel reports its verdict size; the model has none
  }
  if (nftnl_set_is_set(s.get(), NFTNL_SET_TIMEOUT)) set.timeout_ms = nftnl_set_get_u64(s.get(), NFTNL_SET_TIMEOUT);
  if (nftnl_set_is_set(s.get(), NFTNL_SET_USERDATA)) {
    uint32_t n = 0;
    const void* d = nftnl_set_get_data(s.get(), NFTNL_SET_USERDATA, &n);
    if (d) set.userdata.assign(static_cast<const char*>(d), n);
  }
  if (nftnl_set_is_set(s.get(), NFTNL_SET_DESC_CONCAT)) {
    uint32_t n = 0;
    const auto* lens = static_cast<const uint8_t*>(nftnl_set_get_data(s.get(), NFTNL_SET_DESC_CONCAT, &n));
    for (uint32_t i = 0; lens && i < n && i < NFT_REG32_COUNT; ++i) set.fields.push_back(lens[i]);
  }
  into->sets.push_back(std::move(set));
  return Status::Ok();
}

// the elements of one set
Status DecodeElements(const nlmsghdr* nlh, TableState* into) {
  SetPtr s(nftnl_set_alloc());
  if (nftnl_set_elems_nlmsg_parse(nlh, s.get()) < 0 || !nftnl_set_is_set(s.get(), NFTNL_SET_NAME))
    return Malformed("set elements");
  Adopt(into, nftnl_set_get_u32(s.get(), NFTNL_SET_FAMILY), nftnl_set_get_str(s.get(), NFTNL_SET_TABLE));
  auto& list = into->elements[nftnl_set_get_str(s.get(), NFTNL_SET_NAME)];
  nftnl_set_elem_foreach(
      s.get(),
      [](nftnl_set_elem* e, void* p) {
        Element el;
        el.key = ElemBytes(e, NFTNL_SET_ELEM_KEY);
        el.key_end = ElemBytes(e, NFTNL_SET_ELEM_KEY_END);
        if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_VERDICT)) {
          Verdict v{static_cast<int32_t>(nftnl_set_elem_get_u32(e, NFTNL_SET_ELEM_VERDICT)), ""};
          if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_CHAIN)) {
            const char* c = nftnl_set_elem_get_str(e, NFTNL_SET_ELEM_CHAIN);
            v.chain = c ? c : "";
          }
          el.verdict = v;
        } else {
          el.data = ElemBytes(e, NFTNL_SET_ELEM_DATA);
        }
        if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_FLAGS)) el.flags = nftnl_set_elem_get_u32(e, NFTNL_SET_ELEM_FLAGS);
        if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_TIMEOUT))
          el.timeout_ms = nftnl_set_elem_get_u64(e, NFTNL_SET_ELEM_TIMEOUT);
        static_cast<std::vector<Element>*>(p)->push_back(std::move(el));
        return 0;
      },
      &list);
  return Status::Ok();
}

// a named counter or limit (other objects are not Weft's)
Status DecodeObject(const nlmsghdr* nlh, TableState* into) {
  ObjPtr o(nftnl_obj_alloc());
  if (nftnl_obj_nlmsg_parse(nlh, o.get()) < 0 || !nftnl_obj_is_set(o.get(), NFTNL_OBJ_NAME)) return Malformed("object");
  const uint32_t type = nftnl_obj_is_set(o.get(), NFTNL_OBJ_TYPE) ? nftnl_obj_get_u32(o.get(), NFTNL_OBJ_TYPE) : 0;
  if (type != NFT_OBJECT_COUNTER && type != NFT_OBJECT_LIMIT) return Status::Ok();  // not Weft's
  Adopt(into, nftnl_obj_get_u32(o.get(), NFTNL_OBJ_FAMILY), nftnl_obj_get_str(o.get(), NFTNL_OBJ_TABLE));
  if (type == NFT_OBJECT_LIMIT) {
    auto u32 = [&](uint16_t a) { return nftnl_obj_is_set(o.get(), a) ? nftnl_obj_get_u32(o.get(), a) : 0u; };
    auto u64 = [&](uint16_t a) { return nftnl_obj_is_set(o.get(), a) ? nftnl_obj_get_u64(o.get(), a) : uint64_t{0}; };
    into->limits.push_back({nftnl_obj_get_str(o.get(), NFTNL_OBJ_NAME), u64(NFTNL_OBJ_LIMIT_RATE),
                            u64(NFTNL_OBJ_LIMIT_UNIT), u32(NFTNL_OBJ_LIMIT_BURST), u32(NFTNL_OBJ_LIMIT_TYPE),
                            (u32(NFTNL_OBJ_LIMIT_FLAGS) & NFT_LIMIT_F_INV) != 0});
    return Status::Ok();
  }
  NamedCounter k{nftnl_obj_get_str(o.get(), NFTNL_OBJ_NAME), 0, 0};
  if (nftnl_obj_is_set(o.get(), NFTNL_OBJ_CTR_PKTS)) k.packets = nftnl_obj_get_u64(o.get(), NFTNL_OBJ_CTR_PKTS);
  if (nftnl_obj_is_set(o.get(), NFTNL_OBJ_CTR_BYTES)) k.bytes = nftnl_obj_get_u64(o.get(), NFTNL_OBJ_CTR_BYTES);
  into->counters.push_back(std::move(k));
  return Status::Ok();
}

Status DecodeAligned(const nlmsghdr* nlh, TableState* into, bool rule_exprs) {
  if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_NFTABLES) return Status::Ok();
  switch (NFNL_MSG_TYPE(nlh->nlmsg_type)) {
    case NFT_MSG_NEWTABLE:
      return DecodeTable(nlh, into);
    case NFT_MSG_NEWCHAIN:
      return DecodeChain(nlh, into);
    case NFT_MSG_NEWRULE:
      return DecodeRule(nlh, into, rule_exprs);
    case NFT_MSG_NEWSET:
      return DecodeSet(nlh, into);
    case NFT_MSG_NEWSETELEM:
      return DecodeElements(nlh, into);
    case NFT_MSG_NEWOBJ:
      return DecodeObject(nlh, into);
    default:
      return Status::Ok();
  }
}
}  // namespace

namespace {
// Calls `f` for each attribute in [first, end).
template <typename F>
void ForEachAttr(const void* first, const void* end, F f) {
  const char* stop = static_cast<const char*>(end);
  for (auto* a = static_cast<const nlattr*>(first);
       mnl_attr_ok(a, static_cast<int>(stop - reinterpret_cast<const char*>(a))); a = mnl_attr_next(a))
    f(a);
}

const char* PayloadEnd(const nlattr* a) {
  return static_cast<const char*>(mnl_attr_get_payload(a)) + mnl_attr_get_payload_len(a);
}

void CopyAttr(nlmsghdr* out, const nlattr* a) {
  mnl_attr_put(out, a->nla_type, mnl_attr_get_payload_len(a), mnl_attr_get_payload(a));
}

// One expression of a rule, with objref's names ending in NUL.
void CopyExpr(nlmsghdr* out, const nlattr* elem) {
  std::string name;
  ForEachAttr(mnl_attr_get_payload(elem), PayloadEnd(elem), [&](const nlattr* a) {
    if (mnl_attr_get_type(a) == NFTA_EXPR_NAME)
      name.assign(static_cast<const char*>(mnl_attr_get_payload(a)), strnlen(static_cast<const char*>(mnl_attr_get_payload(a)), mnl_attr_get_payload_len(a)));
  });
  nlattr* nest = mnl_attr_nest_start(out, mnl_attr_get_type(elem));
  ForEachAttr(mnl_attr_get_payload(elem), PayloadEnd(elem), [&](const nlattr* a) {
    if (name != "objref" || mnl_attr_get_type(a) != NFTA_EXPR_DATA) return CopyAttr(out, a);
    nlattr* data = mnl_attr_nest_start(out, NFTA_EXPR_DATA);
    ForEachAttr(mnl_attr_get_payload(a), PayloadEnd(a), [&](const nlattr* d) {
      const uint16_t t = mnl_attr_get_type(d);
      if (t != NFTA_OBJREF_IMM_NAME && t != NFTA_OBJREF_SET_NAME) return CopyAttr(out, d);
      const auto* p = static_cast<const char*>(mnl_attr_get_payload(d));
      mnl_attr_put_strz(out, t, std::string(p, strnlen(p, mnl_attr_get_payload_len(d))).c_str());
    });
    mnl_attr_nest_end(out, data);
  });
  mnl_attr_nest_end(out, nest);
}

// A rule as the kernel dumps it: libnftnl writes objref's names without
// their NUL (mnl_attr_put_str; the kernel takes the length) and reads them
// back up to the first NUL, while the kernel's dump carries one
// (nla_put_string), so a request read as a dump would take whatever follows
// the name as part of it.
std::string RuleAsDumped(const std::string& msg) {
  const auto* in = reinterpret_cast<const nlmsghdr*>(msg.data());
  // Each expression is more than 4 bytes, and grows by at most 4 (a NUL
  // where the name filled its padding).
  std::string buf(2 * msg.size(), '\0');
  auto* out = reinterpret_cast<nlmsghdr*>(buf.data());
  const size_t head = NLMSG_LENGTH(sizeof(nfgenmsg));
  std::memcpy(out, in, head);
  out->nlmsg_len = static_cast<uint32_t>(NLMSG_ALIGN(head));
  const char* payload_end = msg.data() + in->nlmsg_len;
  ForEachAttr(mnl_nlmsg_get_payload_offset(in, sizeof(nfgenmsg)), payload_end, [&](const nlattr* a) {
    if (mnl_attr_get_type(a) != NFTA_RULE_EXPRESSIONS) return CopyAttr(out, a);
    nlattr* exprs = mnl_attr_nest_start(out, NFTA_RULE_EXPRESSIONS);
    ForEachAttr(mnl_attr_get_payload(a), PayloadEnd(a), [&](const nlattr* e) { CopyExpr(out, e); });
    mnl_attr_nest_end(out, exprs);
  });
  buf.resize(out->nlmsg_len);
  return buf;
}
}  // namespace

std::string AsDumped(std::string msg) {
  if (msg.size() < NLMSG_LENGTH(sizeof(nfgenmsg))) return msg;
  auto* nlh = reinterpret_cast<nlmsghdr*>(msg.data());
  if (nlh->nlmsg_len > msg.size()) return msg;
  if (NFNL_MSG_TYPE(nlh->nlmsg_type) == NFT_MSG_NEWRULE) return RuleAsDumped(msg);
  if (NFNL_MSG_TYPE(nlh->nlmsg_type) != NFT_MSG_NEWSETELEM) return msg;
  char* tail = static_cast<char*>(mnl_nlmsg_get_payload_tail(nlh));
  for (auto* a = static_cast<nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)));
       mnl_attr_ok(a, static_cast<int>(tail - reinterpret_cast<char*>(a))); a = mnl_attr_next(a)) {
    if (mnl_attr_get_type(a) != NFTA_SET_ELEM_LIST_ELEMENTS) continue;
    char* end = static_cast<char*>(mnl_attr_get_payload(a)) + mnl_attr_get_payload_len(a);
    for (auto* e = static_cast<nlattr*>(mnl_attr_get_payload(a));
         mnl_attr_ok(e, static_cast<int>(end - reinterpret_cast<char*>(e))); e = mnl_attr_next(e))
      e->nla_type = static_cast<uint16_t>((e->nla_type & ~NLA_TYPE_MASK) | NFTA_LIST_ELEM);
  }
  return msg;
}

Status DecodeMessages(const char* buf, size_t len, TableState* into) {
  while (len >= sizeof(nlmsghdr)) {
    nlmsghdr h;
    std::memcpy(&h, buf, sizeof h);
    if (h.nlmsg_len < sizeof h || h.nlmsg_len > len) return Malformed("truncated message");
    if (h.nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg))) return Malformed("message too short");
    // DecodeMessage copies it (aligned, zero-padded) before libnftnl reads it.
    std::vector<uint32_t> hdr(h.nlmsg_len / 4 + 1, 0);
    std::memcpy(hdr.data(), buf, h.nlmsg_len);
    WEFT_RETURN_IF_ERROR(DecodeMessage(reinterpret_cast<const nlmsghdr*>(hdr.data()), into));
    const size_t step = NLMSG_ALIGN(h.nlmsg_len);
    if (step >= len) break;
    buf += step;
    len -= step;
  }
  return Status::Ok();
}

}  // namespace weft::sys::nft
