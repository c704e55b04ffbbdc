#pragma once
// Small string helpers and the validators for names that come from outside
// (container IDs, interface names, network names): every such name is checked
// here before it reaches a path, a link name or a firewall rule.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

std::vector<std::string_view> Split(std::string_view s, char sep);
std::string_view Trim(std::string_view s);
bool StartsWith(std::string_view s, std::string_view p);

// The spec's charset for container IDs and network names:
// ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$
bool IsValidCniName(std::string_view s);
// Linux interface names: 1-15 bytes, not "." or "..", no '/', ':' or space,
// and printable ASCII only: the kernel takes any other byte, but a CNI
// result (JSON) cannot carry a name that is not UTF-8, and a name the
// result could not carry must be refused before the link exists.
// Returns an empty string when valid, else the reason.
std::string InterfaceNameProblem(std::string_view s);
// The offset of the first byte of `s` that is not part of well-formed UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or
// std::string_view::npos when all of `s` is.
size_t Utf8ErrorOffset(std::string_view s);

// FNV-1a 64-bit: stable across versions, used for deterministic link names.
uint64_t Fnv1a64(std::string_view s);
std::string Hex(uint64_t v, int digits);

// Base64, standard alphabet with padding (RFC 4648 section 4): what etcd's
// JSON gateway, kubeconfig *-data fields and libcni's cache (Go's
// encoding/json for []byte) use. Decoding is strict: nullopt for a character
// outside the alphabet, missing padding or a length that is not a multiple
// of 4.
std::string Base64Encode(std::string_view in);
std::optional<std::string> Base64Decode(std::string_view in);

// Percent-encodes a URL query value or path segment, keeping RFC 3986's
// unreserved characters (A-Z a-z 0-9 - _ . ~).
std::string QueryEscape(std::string_view s);

}  // namespace weft
