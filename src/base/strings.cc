#include "base/strings.h"

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
  }
  return {};
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

}  // namespace weft
