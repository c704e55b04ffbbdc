#pragma once
// The sets of table inet weft-netpol's desired model and their bookkeeping
// (issue 30: a unit of its own, apart from the Engine's policy compilation
// and from the rendering): the elements each set holds, the references to
// an element beyond its first, and what changed in each set since the
// kernel last took the model. Pure, thread-compatible.

#include <map>
#include <set>
#include <string>
#include <unordered_map>

namespace weft::policy::netpol {

struct SetDef {
  std::string type;   // "ipv4_addr", "ipv6_addr", "ipv4_addr . inet_proto . inet_service", ...
  bool interval = false;
  std::set<std::string> elements;  // rendered nft elements
  bool operator==(const SetDef&) const = default;
};

class SetLedger {
 public:
  // What changed in one set since the last Applied().
  struct Change {
    bool created = false;  // not in the kernel: add it with every element
    bool flushed = false;  // in the kernel but rebuilt: flush it, add every element
    bool deleted = false;  // in the kernel, no longer wanted
    std::set<std::string> adds, dels;
  };

  // `sets`: the desired model's sets, which the ledger keeps (the Engine
  // owns the map; the ledger is neither copied nor moved with it).
  explicit SetLedger(std::map<std::string, SetDef>* sets) : sets_(sets) {}
  SetLedger(const SetLedger&) = delete;
  SetLedger& operator=(const SetLedger&) = delete;

  // A set (re)defined with its elements: created in the kernel, or, when
  // the kernel has it (or had it earlier in this batch), flushed and filled.
  void Create(const std::string& name, SetDef def);
  // No longer wanted: deleted from the kernel when it is there.
  void Delete(const std::string& name);
  // One reference to `elem` in `set` taken (add) or dropped. An element
  // leaves the set with its last reference; only the first and the last
  // are changes. (Two peers of one rule, or two pods sharing an address in a
  // race, may add the same element; nearly every element has one reference,
  // and no count is kept for those.)
  void Element(const std::string& set, const std::string& elem, bool add);

  const std::map<std::string, Change>& changes() const { return changes_; }
  // Whether the kernel holds `name` (as of the last Applied()).
  bool InKernel(const std::string& name) const { return applied_.count(name) > 0; }
  // The kernel took the changes; `full`: the whole model (every desired set
  // is there, nothing else). The changes are cleared.
  void Applied(bool full);

 private:
  std::map<std::string, SetDef>* sets_;
  std::map<std::string, Change> changes_;
  std::set<std::string> applied_;  // set names in the kernel
  std::unordered_map<std::string, std::unordered_map<std::string, int>> refs_;  // references beyond the first
};

}  // namespace weft::policy::netpol
