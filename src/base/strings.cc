#include "base/strings.h"

#include <algorithm>

namespace weft {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

namespace {
bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
}  // namespace

bool IsValidCniName(std::string_view s) {
  if (s.empty() || !IsAlnum(s[0])) return false;
  for (char c : s)
    if (!IsAlnum(c) && c != '_' && c != '.' && c != '-') return false;
  return true;
}

std::string InterfaceNameProblem(std::string_view s) {
  if (s.empty()) return "is empty";
  if (s.size() > 15) return "is longer than 15 characters";
  if (s == "." || s == "..") return "may not be '.' or '..'";
  for (char c : s) {
    if (c == '/' || c == ':') return "may not contain '/' or ':'";
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f')
      return "may not contain whitespace";
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "may not contain control characters";
    if (static_cast<unsigned char>(c) > 0x7f) return "may contain only ASCII characters";
  }
  return {};
}

size_t Utf8ErrorOffset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;       // overlong
      if (c == 0xed) hi = 0x9f;       // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;       // overlong
      if (c == 0xf4) hi = 0x8f;       // above U+10FFFF
    } else {
      return i;
    }
    if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    i += len;
  }
  return std::string_view::npos;
}

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string Hex(uint64_t v, int digits) {
  static const char kHex[] = "0123456789abcdef";
  std::string s(digits, '0');
  for (int i = digits - 1; i >= 0; --i) {
    s[i] = kHex[v & 0xf];
    v >>= 4;
  }
  return s;
}

namespace {
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    size_t n = std::min<size_t>(3, in.size() - i);  // bytes in this group
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? static_cast<uint8_t>(in[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kBase64[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    size_t pad = 0;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      char c = in[i + k];
      if (c == '=' && last && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      int d = Base64Value(c);
      if (d < 0 || pad > 0) return std::nullopt;  // not in the alphabet, or data after padding
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    for (size_t k = 0; k < 3 - pad; ++k) out += static_cast<char>((v >> (16 - 8 * k)) & 0xff);
  }
  return out;
}

std::string QueryEscape(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (IsAlnum(static_cast<char>(c)) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

}  // namespace weft
