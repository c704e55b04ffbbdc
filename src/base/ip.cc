#include "base/ip.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

namespace weft {

std::optional<IpAddress> IpAddress::Parse(std::string_view s) {
  if (s.empty() || s.size() > 45) return std::nullopt;
  char buf[64];
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = 0;
  IpAddress a;
  if (s.find(':') == std::string_view::npos) {
    if (inet_pton(AF_INET, buf, a.b_.data() + 12) != 1) return std::nullopt;
    return a;
  }
  a.v6_ = true;
  if (inet_pton(AF_INET6, buf, a.b_.data()) != 1) return std::nullopt;
  return a;
}

IpAddress IpAddress::V4(uint32_t h) {
  IpAddress a;
  a.b_[12] = h >> 24;
  a.b_[13] = h >> 16;
  a.b_[14] = h >> 8;
  a.b_[15] = h;
  return a;
}

IpAddress IpAddress::FromBytes(bool v6, const uint8_t* bytes) {
  IpAddress a;
  a.v6_ = v6;
  std::memcpy(v6 ? a.b_.data() : a.b_.data() + 12, bytes, v6 ? 16 : 4);
  return a;
}

uint32_t IpAddress::v4_host_order() const {
  return (uint32_t{b_[12]} << 24) | (uint32_t{b_[13]} << 16) | (uint32_t{b_[14]} << 8) | b_[15];
}

bool IpAddress::is_link_local() const {
  if (!v6_) return b_[12] == 169 && b_[13] == 254;
  return b_[0] == 0xfe && (b_[1] & 0xc0) == 0x80;
}

bool IpAddress::is_unspecified() const {
  for (int i = v6_ ? 0 : 12; i < 16; ++i)
    if (b_[i]) return false;
  return true;
}

IpAddress IpAddress::Plus(uint64_t n) const {
  IpAddress r = *this;
  int lo = v6_ ? 0 : 12;
  unsigned carry = 0;
  for (int i = 15; i >= lo; --i) {
    unsigned sum = r.b_[i] + static_cast<unsigned>(n & 0xff) + carry;
    r.b_[i] = static_cast<uint8_t>(sum);
    carry = sum >> 8;
    n >>= 8;
  }
  return r;
}

std::optional<uint64_t> IpAddress::OffsetFrom(const IpAddress& base) const {
  if (v6_ != base.v6_ || *this < base) return std::nullopt;
  // Subtract byte-wise, then require the high 8 bytes of the difference be 0.
  std::array<uint8_t, 16> d{};
  int borrow = 0;
  for (int i = 15; i >= 0; --i) {
    int v = int{b_[i]} - int{base.b_[i]} - borrow;
    borrow = v < 0;
    d[i] = static_cast<uint8_t>(v + (borrow ? 256 : 0));
  }
  for (int i = 0; i < 8; ++i)
    if (d[i]) return std::nullopt;
  uint64_t r = 0;
  for (int i = 8; i < 16; ++i) r = (r << 8) | d[i];
  return r;
}

std::string IpAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN];
  if (!v6_) {
    inet_ntop(AF_INET, b_.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, b_.data(), buf, sizeof buf);
  }
  return buf;
}

std::optional<IpPrefix> IpPrefix::Parse(std::string_view s, bool strict) {
  auto slash = s.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto addr = IpAddress::Parse(s.substr(0, slash));
  if (!addr) return std::nullopt;
  std::string_view lens = s.substr(slash + 1);
  if (lens.empty() || lens.size() > 3) return std::nullopt;
  int len = 0;
  for (char c : lens) {
    if (c < '0' || c > '9') return std::nullopt;
    len = len * 10 + (c - '0');
  }
  if (len > addr->family_bits()) return std::nullopt;
  IpPrefix p(*addr, len);
  if (strict && p.Masked() != p) return std::nullopt;
  return p;
}

IpPrefix IpPrefix::Masked() const {
  IpAddress a = addr_;
  uint8_t raw[16];
  std::memcpy(raw, a.bytes(), a.size());
  for (int bit = len_; bit < a.family_bits(); ++bit) raw[bit / 8] &= ~(0x80 >> (bit % 8));
  return IpPrefix(IpAddress::FromBytes(a.is_v6(), raw), len_);
}

IpAddress IpPrefix::Last() const {
  IpAddress a = addr_;
  uint8_t raw[16];
  std::memcpy(raw, a.bytes(), a.size());
  for (int bit = len_; bit < a.family_bits(); ++bit) raw[bit / 8] |= static_cast<uint8_t>(0x80 >> (bit % 8));
  return IpAddress::FromBytes(a.is_v6(), raw);
}

bool IpPrefix::Contains(const IpAddress& a) const {
  if (a.is_v6() != addr_.is_v6()) return false;
  return IpPrefix(a, len_).Masked().addr() == Masked().addr();
}

bool IpPrefix::Overlaps(const IpPrefix& o) const {
  if (is_v4() != o.is_v4()) return false;
  return len_ <= o.len_ ? Contains(o.addr_) : o.Contains(addr_);
}

std::string IpPrefix::ToString() const { return addr_.ToString() + "/" + std::to_string(len_); }

std::string FormatMac(const uint8_t* mac, int len) {
  std::string s;
  char buf[4];
  for (int i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, i ? ":%02x" : "%02x", mac[i]);
    s += buf;
  }
  return s;
}

}  // namespace weft
