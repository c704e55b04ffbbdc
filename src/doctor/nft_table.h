#pragma once
// One nftables table reduced to what decides its behaviour, and the
// difference between two of them. Pure (text in, values out), unit-tested
// without root.
//
// Doctor compares the kernel's `table inet weft-netpol` with the ruleset
// weftd wants. weftd writes its rules in nft's input syntax
// ("meta l4proto tcp th dport 80", intervals as "a-b"), and nft prints them
// back canonicalised ("tcp dport 80", "10.0.0.0/23"). Rather than imitate
// nft's printer, doctor loads weftd's script into a private network
// namespace and lists it back with the same nft binary, so both sides are
// nft's own listing and compare exactly (doctor_io.cc). Only what the
// listing leaves free is normalised here: set elements are compared as sets
// (the kernel prints hash sets in hash order), and counter values are
// ignored.

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "sys/nft_types.h"

namespace weft::doctor {

struct NftSet {
  bool map = false;
  std::vector<std::string> decl;   // "type ipv4_addr", "flags interval", ... in order
  std::set<std::string> elements;  // a map's are "key : value"
};

struct NftChain {
  // A base chain's "type filter hook forward priority filter; policy accept;"
  // ("" for a regular chain).
  std::string hook;
  // In order; "counter packets N bytes M" reads "counter", and the elements
  // of an anonymous set ("{ 80, 443 }") are sorted.
  std::vector<std::string> rules;
};

struct NftTable {
  std::string name;                    // "inet weft-netpol"
  std::set<std::string> objects;       // stateful objects: "counter drop-ingress", ...
  std::map<std::string, NftSet> sets;  // sets and maps, by name
  std::map<std::string, NftChain> chains;
};

// Parses the first `table <family> <name> { ... }` block of `text`: nft's
// listing (`nft list table`: tabs, elements wrapped over lines) or an
// `nft -f` script as weftd renders it (lines before the block, such as
// "add table" and "delete table", are skipped; "type x; flags y;" on one
// line). Errors (malformed): no table block, or an unterminated one.
Result<NftTable> ParseNftTable(std::string_view text);

// weftd's GET /netpol/ruleset (the JSON of the full transaction of table
// inet weft-netpol, sys/nft_json.h) as nft would list the table it builds:
// applied to the nftables layer's fake, never to a kernel, and parsed as
// above. Anything else (another table, a transaction that does not apply)
// is an error.
Result<NftTable> NetpolRulesetTable(const std::string& body);
// The same body as the transaction itself (what --fix applies), checked to
// be table inet weft-netpol's.
Result<sys::nft::Transaction> NetpolRulesetTransaction(const std::string& body);

// How `have` (the kernel) differs from `want`.
struct NftTableDiff {
  struct Named {  // a whole chain, set or map
    std::string name;
    size_t size = 0;  // rules or elements
    bool map = false;
  };
  struct Item {
    std::string where;  // chain, set or map name
    std::string what;   // the rule, element, or map entry
  };
  struct Entry {  // a map key present on both sides with another value
    std::string map, key, want, have;
  };
  std::vector<Named> missing_chains, extra_chains;
  std::vector<std::string> changed_hooks;  // "forward: the kernel has ..., weftd wants ..."
  std::vector<Item> missing_rules, extra_rules;
  std::vector<std::string> reordered_chains;           // the same rules in another order
  std::vector<Named> missing_sets, extra_sets;         // maps included
  std::vector<std::string> changed_sets;               // declared differently
  std::vector<Item> missing_elements, extra_elements;  // of sets
  std::vector<Item> missing_entries, extra_entries;    // of maps ("key : value")
  std::vector<Entry> wrong_entries;
  std::vector<std::string> missing_objects, extra_objects;

  bool empty() const;
  // Counts: "1 chain(s) missing, 2 rule(s) missing, 3 set element(s)
  // extra". "" when empty().
  std::string Summary() const;
  // One line per difference, in the order of Summary(); a missing or extra
  // chain or set is one line (with its size), not one per rule or element.
  std::vector<std::string> Lines() const;
};

NftTableDiff DiffNftTables(const NftTable& want, const NftTable& have);

}  // namespace weft::doctor
