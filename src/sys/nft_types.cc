#include "sys/nft_types.h"

#include <cerrno>
#include <cstring>

namespace weft::sys::nft {

namespace {
constexpr uint32_t kTypeBits = 6;  // nftables' TYPE_BITS
}

uint32_t ConcatType(const std::vector<DataType>& fields) {
  uint32_t t = 0;
  for (DataType f : fields) t = t << kTypeBits | f;
  return t;
}

std::vector<DataType> ConcatFields(uint32_t type) {
  std::vector<DataType> v;
  for (; type; type >>= kTypeBits) v.insert(v.begin(), static_cast<DataType>(type & ((1u << kTypeBits) - 1)));
  return v;
}

uint32_t DataTypeLen(DataType t) {
  switch (t) {
    case kTypeIpv4: return 4;
    case kTypeIpv6: return 16;
    case kTypeEther: return 6;
    case kTypeInetProto: return 1;
    case kTypeInetService: return 2;
    case kTypeMark: return 4;
    case kTypeIcmp6Type: return 1;
    case kTypeCtState: return 4;
    case kTypeIfname: return 16;
    default: return 0;
  }
}

uint32_t CanonicalRegister(uint32_t reg) {
  constexpr uint32_t kReg32_00 = 8, kPer = 4;  // NFT_REG32_00; 4-byte registers per 16-byte one
  if (reg >= kReg32_00 && (reg - kReg32_00) % kPer == 0) return 1 + (reg - kReg32_00) / kPer;
  return reg;
}

bool IsAnonymousSetName(const std::string& set) { return set.rfind("__set", 0) == 0; }

const char* VerbName(Verb v) {
  switch (v) {
    case Verb::kAdd: return "add";
    case Verb::kCreate: return "create";
    case Verb::kDelete: return "delete";
    case Verb::kDestroy: return "destroy";
    case Verb::kFlush: return "flush";
  }
  return "?";
}

std::optional<Verb> VerbFromName(const std::string& name) {
  for (Verb v : {Verb::kAdd, Verb::kCreate, Verb::kDelete, Verb::kDestroy, Verb::kFlush})
    if (name == VerbName(v)) return v;
  return std::nullopt;
}

Rule CanonicalRule(Rule r) {
  auto c = [](uint32_t& reg) { reg = CanonicalRegister(reg); };
  for (Expr& x : r.exprs) {
    if (auto* e = std::get_if<Meta>(&x)) c(e->dreg);
    if (auto* e = std::get_if<Payload>(&x)) c(e->dreg);
    if (auto* e = std::get_if<Ct>(&x)) c(e->dreg);
    if (auto* e = std::get_if<Cmp>(&x)) c(e->sreg);
    if (auto* e = std::get_if<Bitwise>(&x)) c(e->sreg), c(e->dreg);
    if (auto* e = std::get_if<Lookup>(&x)) {
      c(e->sreg);
      if (e->dreg) c(*e->dreg);
    }
    if (auto* e = std::get_if<Immediate>(&x)) c(e->dreg);
    if (auto* e = std::get_if<Nat>(&x)) c(e->reg_addr), c(e->reg_proto);
    if (auto* e = std::get_if<Numgen>(&x)) c(e->dreg);
    if (auto* e = std::get_if<Fib>(&x)) c(e->dreg);
    if (auto* e = std::get_if<MetaSet>(&x)) c(e->sreg);
    if (auto* e = std::get_if<Dynset>(&x)) c(e->sreg_key);
  }
  return r;
}

Status OpError(const std::string& what, int err, const std::string& kernel_msg) {
  Reason r = Reason::kFailed;
  if (err == ENOENT) r = Reason::kNotFound;
  if (err == EEXIST) r = Reason::kAlreadyExists;
  if (err == EBUSY) r = Reason::kBusy;
  std::string details = err ? std::strerror(err) : "";
  if (!kernel_msg.empty()) details += (details.empty() ? "" : ": ") + kernel_msg;
  return Status::Error(r, Domain::kFirewall, "nftables: " + what, details, err);
}

}  // namespace weft::sys::nft
