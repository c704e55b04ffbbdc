#pragma once
// The typed nftables objects (sys/nft_types.h) in nft's own syntax, for
// doctor, logs, error messages and docs: a table as `nft list table`
// prints it, an op as the nft command that does the same, a transaction
// as the `nft -f` script. Pure.
//
// Rules are rendered the way nft reads its own rules back: the loads of
// a match become its field (`ip saddr`, `udp dport`, `iifname`, a raw
// `@th,336,32`), the dependencies nft adds itself (`meta nfproto ipv4`
// before `ip saddr` in an inet table, `meta l4proto udp` before `udp
// dport`) are left out, consecutive loads before a lookup are a
// concatenation. What it has no words for it prints as the kernel's
// terms (`meta key 42`), never wrongly as something else.

#include <string>
#include <vector>

#include "sys/nft_types.h"

namespace weft::sys::nft {

std::string FamilyName(Family f);

// One rule's statements (`ip saddr @peers4 counter packets 0 bytes 0 drop
// comment "x"`), without the chain or table.
std::string RenderRule(Family family, const Rule& rule);

// A set's element in nft's syntax, given the set (key and data types).
std::string RenderElement(const Set& set, const Element& e);

// The table as `nft list table <family> <name>` prints it: counters, sets
// (with their elements), then chains with their rules, tab-indented.
std::string RenderTable(const TableState& t);

// The nft command for one op of a transaction of `table`: "add rule inet
// t c ...", "flush chain inet t c", "delete set inet t s". Elements are
// rendered with the types of `known` sets (else as bytes).
std::string RenderOp(Family family, const std::string& table, const Op& op, const std::vector<Set>& known = {});

// The transaction as one `nft -f` script (one command per line); elements
// use the types of sets the transaction itself declares.
std::string RenderTransaction(const Transaction& tx);

}  // namespace weft::sys::nft
