#pragma once
// nft's own metadata of a set (NFTA_SET_USERDATA): the kernel stores it and
// never reads it; nft uses it to print the set back as it was declared, its
// key's byte order and, for `typeof`, the expressions the key was written
// with (`typeof ip saddr . @th,336,32`). A set the layer creates carries the
// same bytes nft 1.0.6 writes for the same declaration, so `nft list` shows
// it exactly as if nft had made it (the netns suite compares the two).
// Encoded and parsed with libnftnl's udata functions. Pure.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace weft::sys::nft {

// nft's byte orders (its include/expression.h).
enum class ByteOrder : uint32_t { kInvalid = 0, kHost = 1, kBig = 2 };

// One payload field of a `typeof` key, in nft's terms: a named field of a
// protocol nft knows (desc, tmpl: its proto_desc id and template index,
// e.g. ip saddr = 12, 11), or a raw one (desc 0: base 1 @ll, 2 @nh, 3 @th,
// offset and length in bits).
// Or a meta key (meta set: `iifname`, NFT_META_IIFNAME), or a ct key
// (`ct state`, NFT_CT_STATE, no direction).
struct TypeofField {
  uint32_t desc = 0, tmpl = 0;
  uint32_t base = 0, offset_bits = 0, len_bits = 0;
  bool meta = false;
  uint32_t meta_key = 0;  // NFT_META_*
  bool ct = false;
  uint32_t ct_key = 0;  // NFT_CT_*
  bool operator==(const TypeofField&) const = default;
};
TypeofField TypeofIpSaddr();
TypeofField TypeofIp6Saddr();
TypeofField TypeofIcmpv6Type();
TypeofField TypeofRaw(uint32_t base, uint32_t offset_bits, uint32_t len_bits);
TypeofField TypeofMeta(uint32_t key);
TypeofField TypeofCt(uint32_t key);

// What nft writes for `type t` (one field): the key's byte order.
std::string SetUserdata(ByteOrder key);
// For a concatenation: `type a . b` (fields empty: nft records only that
// the key is a concatenation) or `typeof f1 . f2` (fields given); the key's
// byte order is kInvalid for any concatenation.
std::string ConcatSetUserdata(const std::vector<TypeofField>& fields);
// For a map `type a : verdict` (one key field of byte order `key`).
std::string MapUserdata(ByteOrder key);
// For a map `type a . b : c . d` (key and data concatenations).
std::string ConcatMapUserdata();
// For a verdict map `type a . b : verdict` (a concatenated key).
std::string ConcatVerdictMapUserdata();
// For a one-field key nft knows by its expression (an anonymous set of
// `icmpv6 type { ... }`): the byte order, then the field.
std::string TypeofSetUserdata(ByteOrder key, const TypeofField& field);

// What a dump's userdata says of the key: the typeof fields of a
// concatenation when it names them (nullopt otherwise: a `type` set, or
// metadata this parser does not know).
std::optional<std::vector<TypeofField>> TypeofFields(const std::string& userdata);

// The key's byte order a set's userdata records (nullopt without one).
std::optional<ByteOrder> KeyByteOrder(const std::string& userdata);

// A field in nft's words: "ip saddr", "@th,336,32", "iifname" ("" when unknown).
std::string TypeofFieldText(const TypeofField& f);

}  // namespace weft::sys::nft
