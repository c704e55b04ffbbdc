#include "sys/nft_udata.h"

#include <libnftnl/udata.h>
#include <linux/netfilter/nf_tables.h>

#include <memory>

namespace weft::sys::nft {
namespace {

// nft's attribute numbers inside NFTNL_UDATA_SET_KEY_TYPEOF (its src/
// expression.c and payload.c): the expression's type, then its data.
enum : uint8_t { kTypeofExpr = 0, kTypeofData = 1 };
enum : uint8_t { kPayloadDesc = 0, kPayloadTmpl = 1, kPayloadBase = 2, kPayloadOffset = 3, kPayloadLen = 4 };
enum : uint8_t { kMetaKey = 0 };
enum : uint8_t { kCtKey = 0, kCtDir = 1 };
// nft's expression types (EXPR_PAYLOAD, EXPR_META, EXPR_CT, EXPR_CONCAT).
constexpr uint32_t kExprPayload = 7, kExprMeta = 9, kExprCt = 12, kExprConcat = 13;
// NFTNL_UDATA_SET_DATA_INTERVAL: whether a map's data are ranges.
constexpr uint8_t kDataInterval = 6;
// nft's proto_desc ids of the protocols named below.
constexpr uint32_t kDescIp = 12, kDescIp6 = 13, kDescIcmp6 = 14;

struct BufFree {
  void operator()(nftnl_udata_buf* b) const { nftnl_udata_buf_free(b); }
};
using Buf = std::unique_ptr<nftnl_udata_buf, BufFree>;

std::string Bytes(const Buf& b) {
  return std::string(static_cast<const char*>(nftnl_udata_buf_data(b.get())), nftnl_udata_buf_len(b.get()));
}

// One field's expression and data, in the nest `index` (a concatenation's
// field number, or NFTNL_UDATA_SET_KEY_TYPEOF for a key of one field).
void PutField(nftnl_udata_buf* b, uint8_t index, const TypeofField& f) {
  nftnl_udata* field = nftnl_udata_nest_start(b, index);
  if (f.ct) {
    nftnl_udata_put_u32(b, kTypeofExpr, kExprCt);
    nftnl_udata* data = nftnl_udata_nest_start(b, kTypeofData);
    nftnl_udata_put_u32(b, kCtKey, f.ct_key);
    nftnl_udata_put_u32(b, kCtDir, 0xffffffff);  // no direction
    nftnl_udata_nest_end(b, data);
    nftnl_udata_nest_end(b, field);
    return;
  }
  if (f.meta) {
    nftnl_udata_put_u32(b, kTypeofExpr, kExprMeta);
    nftnl_udata* data = nftnl_udata_nest_start(b, kTypeofData);
    nftnl_udata_put_u32(b, kMetaKey, f.meta_key);
    nftnl_udata_nest_end(b, data);
    nftnl_udata_nest_end(b, field);
    return;
  }
  nftnl_udata_put_u32(b, kTypeofExpr, kExprPayload);
  nftnl_udata* data = nftnl_udata_nest_start(b, kTypeofData);
  nftnl_udata_put_u32(b, kPayloadDesc, f.desc);
  nftnl_udata_put_u32(b, kPayloadTmpl, f.tmpl);
  if (f.desc == 0) {
    nftnl_udata_put_u32(b, kPayloadBase, f.base);
    nftnl_udata_put_u32(b, kPayloadOffset, f.offset_bits);
    nftnl_udata_put_u32(b, kPayloadLen, f.len_bits);
  }
  nftnl_udata_nest_end(b, data);
  nftnl_udata_nest_end(b, field);
}

// The attributes of one nest, by type (later ones of a type win).
struct Attrs {
  const nftnl_udata* a[256] = {};
};
int Keep(const nftnl_udata* attr, void* data) {
  static_cast<Attrs*>(data)->a[nftnl_udata_type(attr)] = attr;
  return 0;
}
bool ParseNest(const nftnl_udata* nest, Attrs* out) {
  return nftnl_udata_parse(nftnl_udata_get(nest), nftnl_udata_len(nest), Keep, out) >= 0;
}
std::optional<uint32_t> U32(const nftnl_udata* a) {
  if (!a || nftnl_udata_len(a) != sizeof(uint32_t)) return std::nullopt;
  return nftnl_udata_get_u32(a);
}

std::optional<TypeofField> ParseField(const nftnl_udata* nest) {
  Attrs f;
  if (!ParseNest(nest, &f) || !f.a[kTypeofData]) return std::nullopt;
  const auto expr = U32(f.a[kTypeofExpr]);
  if (expr != kExprPayload && expr != kExprMeta) return std::nullopt;
  Attrs d;
  if (!ParseNest(f.a[kTypeofData], &d)) return std::nullopt;
  if (expr == kExprMeta) {
    auto key = U32(d.a[kMetaKey]);
    if (!key) return std::nullopt;
    return TypeofMeta(*key);
  }
  auto desc = U32(d.a[kPayloadDesc]), tmpl = U32(d.a[kPayloadTmpl]);
  if (!desc || !tmpl) return std::nullopt;
  TypeofField out{*desc, *tmpl};
  if (*desc == 0) {
    auto base = U32(d.a[kPayloadBase]), off = U32(d.a[kPayloadOffset]), len = U32(d.a[kPayloadLen]);
    if (!base || !off || !len) return std::nullopt;
    out.base = *base;
    out.offset_bits = *off;
    out.len_bits = *len;
  }
  return out;
}

}  // namespace

TypeofField TypeofIpSaddr() { return {kDescIp, 11}; }
TypeofField TypeofIp6Saddr() { return {kDescIp6, 8}; }
TypeofField TypeofIcmpv6Type() { return {kDescIcmp6, 1}; }
TypeofField TypeofRaw(uint32_t base, uint32_t offset_bits, uint32_t len_bits) {
  return {0, 0, base, offset_bits, len_bits};
}
TypeofField TypeofMeta(uint32_t key) { return {0, 0, 0, 0, 0, true, key}; }
TypeofField TypeofCt(uint32_t key) { return {0, 0, 0, 0, 0, false, 0, true, key}; }

std::string SetUserdata(ByteOrder key) {
  Buf b(nftnl_udata_buf_alloc(NFT_USERDATA_MAXLEN));
  nftnl_udata_put_u32(b.get(), NFTNL_UDATA_SET_KEYBYTEORDER, static_cast<uint32_t>(key));
  return Bytes(b);
}

std::string ConcatSetUserdata(const std::vector<TypeofField>& fields) {
  Buf b(nftnl_udata_buf_alloc(NFT_USERDATA_MAXLEN));
  nftnl_udata_put_u32(b.get(), NFTNL_UDATA_SET_KEYBYTEORDER, static_cast<uint32_t>(ByteOrder::kInvalid));
  nftnl_udata* key = nftnl_udata_nest_start(b.get(), NFTNL_UDATA_SET_KEY_TYPEOF);
  nftnl_udata_put_u32(b.get(), kTypeofExpr, kExprConcat);
  nftnl_udata* data = nftnl_udata_nest_start(b.get(), kTypeofData);
  for (size_t i = 0; i < fields.size(); ++i) PutField(b.get(), static_cast<uint8_t>(i), fields[i]);
  nftnl_udata_nest_end(b.get(), data);
  nftnl_udata_nest_end(b.get(), key);
  return Bytes(b);
}

std::string MapUserdata(ByteOrder key) {
  Buf b(nftnl_udata_buf_alloc(NFT_USERDATA_MAXLEN));
  nftnl_udata_put_u32(b.get(), NFTNL_UDATA_SET_KEYBYTEORDER, static_cast<uint32_t>(key));
  nftnl_udata_put_u32(b.get(), NFTNL_UDATA_SET_DATABYTEORDER, static_cast<uint32_t>(ByteOrder::kInvalid));
  nftnl_udata_put_u32(b.get(), kDataInterval, 0);
  return Bytes(b);
}

std::string ConcatMapUserdata() {
  Buf b(nftnl_udata_buf_alloc(NFT_USERDATA_MAXLEN));
  nftnl_udata_put_u32(b.get(), NFTNL_UDATA_SET_KEYBYTEORDER, static_cast<uint32_t>(ByteOrder::kInvalid));
  nftnl_udata_put_u32(b.get(), NFTNL_UDATA_SET_DATABYTEORDER, static_cast<uint32_t>(ByteOrder::kInvalid));
  for (uint8_t which : {uint8_t{NFTNL_UDATA_SET_KEY_TYPEOF}, uint8_t{NFTNL_UDATA_SET_DATA_TYPEOF}}) {
    nftnl_udata* key = nftnl_udata_nest_start(b.get(), which);
    nftnl_udata_put_u32(b.get(), kTypeofExpr, kExprConcat);
    nftnl_udata* data = nftnl_udata_nest_start(b.get(), kTypeofData);
    nftnl_udata_nest_end(b.get(), data);
    nftnl_udata_nest_end(b.get(), key);
  }
  nftnl_udata_put_u32(b.get(), kDataInterval, 0);
  return Bytes(b);
}

std::string ConcatVerdictMapUserdata() {
  Buf b(nftnl_udata_buf_alloc(NFT_USERDATA_MAXLEN));
  nftnl_udata_put_u32(b.get(), NFTNL_UDATA_SET_KEYBYTEORDER, static_cast<uint32_t>(ByteOrder::kInvalid));
  nftnl_udata_put_u32(b.get(), NFTNL_UDATA_SET_DATABYTEORDER, static_cast<uint32_t>(ByteOrder::kInvalid));
  nftnl_udata* key = nftnl_udata_nest_start(b.get(), NFTNL_UDATA_SET_KEY_TYPEOF);
  nftnl_udata_put_u32(b.get(), kTypeofExpr, kExprConcat);
  nftnl_udata* data = nftnl_udata_nest_start(b.get(), kTypeofData);
  nftnl_udata_nest_end(b.get(), data);
  nftnl_udata_nest_end(b.get(), key);
  nftnl_udata_put_u32(b.get(), kDataInterval, 0);
  return Bytes(b);
}

std::string TypeofSetUserdata(ByteOrder key, const TypeofField& field) {
  Buf b(nftnl_udata_buf_alloc(NFT_USERDATA_MAXLEN));
  nftnl_udata_put_u32(b.get(), NFTNL_UDATA_SET_KEYBYTEORDER, static_cast<uint32_t>(key));
  PutField(b.get(), NFTNL_UDATA_SET_KEY_TYPEOF, field);
  return Bytes(b);
}

std::optional<std::vector<TypeofField>> TypeofFields(const std::string& userdata) {
  if (userdata.empty()) return std::nullopt;
  Attrs top;
  if (nftnl_udata_parse(userdata.data(), static_cast<uint32_t>(userdata.size()), Keep, &top) < 0 ||
      !top.a[NFTNL_UDATA_SET_KEY_TYPEOF])
    return std::nullopt;
  Attrs key;
  if (!ParseNest(top.a[NFTNL_UDATA_SET_KEY_TYPEOF], &key) || U32(key.a[kTypeofExpr]) != kExprConcat ||
      !key.a[kTypeofData])
    return std::nullopt;
  Attrs fields;
  if (!ParseNest(key.a[kTypeofData], &fields)) return std::nullopt;
  std::vector<TypeofField> out;
  for (int i = 0; i < 256 && fields.a[i]; ++i) {
    auto f = ParseField(fields.a[i]);
    if (!f || TypeofFieldText(*f).empty()) return std::nullopt;
    out.push_back(*f);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<ByteOrder> KeyByteOrder(const std::string& userdata) {
  Attrs top;
  if (userdata.empty() ||
      nftnl_udata_parse(userdata.data(), static_cast<uint32_t>(userdata.size()), Keep, &top) < 0 ||
      !top.a[NFTNL_UDATA_SET_KEYBYTEORDER])
    return std::nullopt;
  const auto order = U32(top.a[NFTNL_UDATA_SET_KEYBYTEORDER]);
  if (!order) return std::nullopt;
  return static_cast<ByteOrder>(*order);
}

std::string TypeofFieldText(const TypeofField& f) {
  if (f.ct) return f.ct_key == NFT_CT_STATE ? "ct state" : "";
  if (f.meta) return f.meta_key == NFT_META_IIFNAME ? "iifname" : f.meta_key == NFT_META_OIFNAME ? "oifname" : "";
  if (f == TypeofIpSaddr()) return "ip saddr";
  if (f == TypeofIcmpv6Type()) return "icmpv6 type";
  if (f == TypeofIp6Saddr()) return "ip6 saddr";
  if (f == TypeofField{kDescIp, 12}) return "ip daddr";
  if (f == TypeofField{kDescIp6, 9}) return "ip6 daddr";
  if (f.desc != 0 || f.base < 1 || f.base > 3) return "";
  static const char* const kBase[] = {"", "@ll", "@nh", "@th"};
  return std::string(kBase[f.base]) + "," + std::to_string(f.offset_bits) + "," + std::to_string(f.len_bits);
}

}  // namespace weft::sys::nft
