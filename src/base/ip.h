#pragma once
// IP addresses and prefixes, IPv4 and IPv6, as plain values. Pure logic: no
// syscalls, so the allocator and config validation are testable without root.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace weft {

class IpAddress {
 public:
  IpAddress() = default;
  static std::optional<IpAddress> Parse(std::string_view s);
  static IpAddress V4(uint32_t host_order);
  static IpAddress FromBytes(bool v6, const uint8_t* bytes);

  bool is_v4() const { return !v6_; }
  bool is_v6() const { return v6_; }
  int family_bits() const { return v6_ ? 128 : 32; }
  // Network-order bytes: 4 for IPv4, 16 for IPv6.
  const uint8_t* bytes() const { return v6_ ? b_.data() : b_.data() + 12; }
  int size() const { return v6_ ? 16 : 4; }
  // bytes() as a string of size() bytes (an nft set key's field).
  std::string ToBytes() const { return std::string(reinterpret_cast<const char*>(bytes()), static_cast<size_t>(size())); }
  uint32_t v4_host_order() const;
  bool is_link_local() const;
  bool is_unspecified() const;

  // this + n (n may exceed 64 bits only in theory; offsets we use fit).
  IpAddress Plus(uint64_t n) const;
  // (this - base) when this >= base and the difference fits in 64 bits.
  std::optional<uint64_t> OffsetFrom(const IpAddress& base) const;

  std::string ToString() const;
  auto operator<=>(const IpAddress&) const = default;

 private:
  bool v6_ = false;
  std::array<uint8_t, 16> b_{};  // IPv4 lives in the last 4 bytes.
};

class IpPrefix {
 public:
  IpPrefix() = default;
  IpPrefix(IpAddress addr, int len) : addr_(addr), len_(len) {}
  // "10.0.0.0/24", "fd00::/64". With `strict`, host bits must be zero.
  static std::optional<IpPrefix> Parse(std::string_view s, bool strict = false);

  const IpAddress& addr() const { return addr_; }
  int len() const { return len_; }
  bool is_v4() const { return addr_.is_v4(); }
  IpPrefix Masked() const;  // host bits cleared
  IpAddress Last() const;   // every host bit set: the prefix's last address
  bool Contains(const IpAddress& a) const;
  bool Overlaps(const IpPrefix& o) const;
  // Number of host bits (32-len or 128-len).
  int host_bits() const { return addr_.family_bits() - len_; }
  std::string ToString() const;
  auto operator<=>(const IpPrefix&) const = default;

 private:
  IpAddress addr_;
  int len_ = 0;
};

// 6-byte MAC formatted aa:bb:cc:dd:ee:ff.
std::string FormatMac(const uint8_t* mac, int len = 6);

}  // namespace weft
