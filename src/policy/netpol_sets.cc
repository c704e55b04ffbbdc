#include "policy/netpol_sets.h"

namespace weft::policy::netpol {

void SetLedger::Create(const std::string& name, SetDef def) {
  (*sets_)[name] = std::move(def);
  Change& c = changes_[name];
  const bool in_kernel = c.deleted || applied_.count(name);  // maybe deleted earlier in this batch
  c = Change{};
  (in_kernel ? c.flushed : c.created) = true;
}

void SetLedger::Delete(const std::string& name) {
  sets_->erase(name);
  refs_.erase(name);
  if (applied_.count(name)) {
    Change& c = changes_[name];
    c = Change{};
    c.deleted = true;
  } else {
    changes_.erase(name);
  }
}

void SetLedger::Element(const std::string& set, const std::string& elem, bool add) {
  Change& c = changes_[set];
  const bool whole = c.created || c.flushed;  // rendered from the desired elements
  if (add) {
    if (!(*sets_)[set].elements.insert(elem).second) {
      ++refs_[set][elem];  // a second reference: counted apart
      return;
    }
    if (!whole && !c.dels.erase(elem)) c.adds.insert(elem);
    return;
  }
  if (auto s = refs_.find(set); s != refs_.end()) {
    if (auto it = s->second.find(elem); it != s->second.end()) {
      if (--it->second == 0) s->second.erase(it);
      if (s->second.empty()) refs_.erase(s);
      return;  // other references remain
    }
  }
  auto d = sets_->find(set);
  if (d == sets_->end() || d->second.elements.erase(elem) == 0) return;
  if (!whole && !c.adds.erase(elem)) c.dels.insert(elem);
}

void SetLedger::Applied(bool full) {
  if (full) {
    applied_.clear();
    for (const auto& [name, def] : *sets_) applied_.insert(name);
  } else {
    for (const auto& [name, c] : changes_) {
      if (c.deleted) applied_.erase(name);
      else if (c.created) applied_.insert(name);
    }
  }
  changes_.clear();
}

}  // namespace weft::policy::netpol
