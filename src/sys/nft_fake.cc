#include "sys/nft_fake.h"

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "sys/nft_render.h"

namespace weft::sys::nft {
namespace {

constexpr char kNothingApplied[] = " (nothing of the transaction was applied)";

template <typename T>
T* FindNamed(std::vector<T>& v, const std::string& name) {
  for (auto& x : v)
    if (x.name == name) return &x;
  return nullptr;
}

// An element's identity: its key (and a one-field range's end half, a
// concatenated range's end).
bool SameElement(const Element& a, const Element& b) {
  return a.key == b.key && a.key_end == b.key_end && (a.flags & NFT_SET_ELEM_INTERVAL_END) == (b.flags & NFT_SET_ELEM_INTERVAL_END);
}

bool SameData(const Element& a, const Element& b) { return a.data == b.data && a.verdict == b.verdict; }

bool Jumps(const Verdict& v, const std::string& chain) {
  return (v.code == NFT_JUMP || v.code == NFT_GOTO) && v.chain == chain;
}

// One op against one table's state; the errno of a failure, 0 on success.
class Applier {
 public:
  Applier(TableState* t, bool* exists, uint64_t* handle) : t_(t), exists_(exists), handle_(handle) {}

  int Apply(const Op& op) {
    if (const auto* x = std::get_if<Table>(&op.object)) return OnTable(op.verb, *x);
    if (!*exists_) return ENOENT;
    if (const auto* x = std::get_if<Chain>(&op.object)) return OnChain(op.verb, *x);
    if (const auto* x = std::get_if<Rule>(&op.object)) return OnRule(op.verb, *x);
    if (const auto* x = std::get_if<Set>(&op.object)) return OnSet(op.verb, *x);
    if (const auto* x = std::get_if<Elements>(&op.object)) return OnElements(op.verb, *x);
    if (const auto* x = std::get_if<NamedCounter>(&op.object)) return OnCounter(op.verb, *x);
    if (const auto* x = std::get_if<NamedLimit>(&op.object)) return OnLimit(op.verb, *x);
    return EINVAL;
  }

 private:
  int OnTable(Verb v, const Table& x) {
    switch (v) {
      case Verb::kAdd:
      case Verb::kCreate:
        if (*exists_) return v == Verb::kCreate ? EEXIST : 0;
        *exists_ = true;
        *t_ = TableState{t_->family, x, {}, {}, {}, {}, {}, {}};
        return 0;
      case Verb::kDelete:
      case Verb::kDestroy:
        if (!*exists_) return v == Verb::kDelete ? ENOENT : 0;
        *exists_ = false;
        *t_ = TableState{t_->family, {}, {}, {}, {}, {}, {}, {}};
        return 0;
      case Verb::kFlush:
        if (!*exists_) return ENOENT;
        t_->rules.clear();
        ReleaseAnonymous();
        return 0;
    }
    return EINVAL;
  }

  bool ChainInUse(const std::string& name) const {
    for (const auto& r : t_->rules) {
      if (r.chain == name) continue;
      for (const auto& e : r.exprs)
        if (const auto* v = std::get_if<Verdict>(&e); v && Jumps(*v, name)) return true;
    }
    for (const auto& [set, elems] : t_->elements)
      for (const auto& e : elems)
        if (e.verdict && Jumps(*e.verdict, name)) return true;
    return false;
  }

  int OnChain(Verb v, const Chain& x) {
    Chain* c = FindNamed(t_->chains, x.name);
    switch (v) {
      case Verb::kAdd:
      case Verb::kCreate:
        if (c) {
          if (v == Verb::kCreate) return EEXIST;
          if (!x.hook) return 0;
          if (!c->hook) return EEXIST;
          Hook a = *c->hook, b = *x.hook;
          a.policy = b.policy;
          if (!(a == b)) return EEXIST;
          c->hook->policy = x.hook->policy;
          return 0;
        }
        if (x.name.empty()) return EINVAL;
        t_->chains.push_back(x);
        return 0;
      case Verb::kDelete:
      case Verb::kDestroy:
        if (!c) return v == Verb::kDelete ? ENOENT : 0;
        if (ChainInUse(x.name)) return EBUSY;
        std::erase_if(t_->rules, [&](const Rule& r) { return r.chain == x.name; });
        std::erase_if(t_->chains, [&](const Chain& ch) { return ch.name == x.name; });
        ReleaseAnonymous();
        return 0;
      case Verb::kFlush:
        if (!c) return ENOENT;
        std::erase_if(t_->rules, [&](const Rule& r) { return r.chain == x.name; });
        ReleaseAnonymous();
        return 0;
    }
    return EINVAL;
  }

  int CheckRefs(const Rule& r) {
    for (const auto& e : r.exprs) {
      if (const auto* v = std::get_if<Verdict>(&e)) {
        if (v->code == NFT_JUMP || v->code == NFT_GOTO) {
          const Chain* target = FindNamed(t_->chains, v->chain);
          if (!target) return ENOENT;
          if (target->hook) return EOPNOTSUPP;
        }
      } else if (const auto* l = std::get_if<Lookup>(&e)) {
        if (!FindNamed(t_->sets, l->set)) return ENOENT;
      } else if (const auto* d = std::get_if<Dynset>(&e)) {
        const Set* s = FindNamed(t_->sets, d->set);
        if (!s) return ENOENT;
        // The kernel picks a backend that can be updated from the packet path only for `flags dynamic`.
        if (!(s->flags & NFT_SET_EVAL) || (d->timeout_ms && !(s->flags & NFT_SET_TIMEOUT))) return EOPNOTSUPP;
      } else if (const auto* k = std::get_if<CounterRef>(&e)) {
        if (!FindNamed(t_->counters, k->name)) return ENOENT;
      } else if (const auto* k = std::get_if<LimitRef>(&e)) {
        if (!FindNamed(t_->limits, k->name)) return ENOENT;
      }
    }
    return 0;
  }

  int OnRule(Verb v, const Rule& x) {
    if (!FindNamed(t_->chains, x.chain)) return ENOENT;
    switch (v) {
      case Verb::kAdd:
      case Verb::kCreate: {
        Rule r = CanonicalRule(x);  // as the kernel reports its registers
        for (Expr& e : r.exprs)
          if (auto* l = std::get_if<Lookup>(&e)) l->set = Resolve(l->set);
        if (int err = CheckRefs(r)) return err;
        r.handle = ++*handle_;
        t_->rules.push_back(std::move(r));
        return 0;
      }
      case Verb::kDelete:
      case Verb::kDestroy: {
        auto it = std::find_if(t_->rules.begin(), t_->rules.end(),
                               [&](const Rule& r) { return r.chain == x.chain && r.handle == x.handle; });
        if (it == t_->rules.end()) return v == Verb::kDelete ? ENOENT : 0;
        t_->rules.erase(it);
        ReleaseAnonymous();
        return 0;
      }
      case Verb::kFlush:
        return EINVAL;
    }
    return EINVAL;
  }

  bool SetInUse(const std::string& name) const {
    for (const auto& r : t_->rules)
      for (const auto& e : r.exprs)
        if (const auto* l = std::get_if<Lookup>(&e); l && l->set == name) return true;
        else if (const auto* d = std::get_if<Dynset>(&e); d && d->set == name) return true;
    return false;
  }

  // The kernel's name for a set a transaction named: an anonymous set it
  // added gets the lowest "__set<N>" free in the table.
  std::string Resolve(const std::string& name) const {
    auto it = anon_.find(name);
    return it == anon_.end() ? name : it->second;
  }

  // An anonymous set goes with the last rule that looks it up.
  void ReleaseAnonymous() {
    std::erase_if(t_->sets, [&](const Set& s) {
      if (!(s.flags & NFT_SET_ANONYMOUS) || SetInUse(s.name)) return false;
      t_->elements.erase(s.name);
      return true;
    });
  }

  int AddAnonymous(const Set& x) {
    if (!IsAnonymousSetName(x.name) || !(x.flags & NFT_SET_CONSTANT) || x.key_len == 0 || x.key_len > 64) return EINVAL;
    for (uint32_t n = 0;; ++n) {
      std::string name = "__set" + std::to_string(n);
      if (FindNamed(t_->sets, name)) continue;
      Set s = x;
      s.name = name;
      anon_[x.name] = name;
      t_->sets.push_back(std::move(s));
      return 0;
    }
  }

  int OnSet(Verb v, const Set& x) {
    if (x.flags & NFT_SET_ANONYMOUS) return v == Verb::kAdd || v == Verb::kCreate ? AddAnonymous(x) : EINVAL;
    Set* s = FindNamed(t_->sets, x.name);
    switch (v) {
      case Verb::kAdd:
      case Verb::kCreate:
        if (s) return v == Verb::kCreate || !(*s == x) ? EEXIST : 0;
        if (x.name.empty() || x.key_len == 0 || x.key_len > 64) return EINVAL;
        if ((x.flags & NFT_SET_MAP) && x.data_type != kTypeVerdict && x.data_len == 0) return EINVAL;
        t_->sets.push_back(x);
        return 0;
      case Verb::kDelete:
      case Verb::kDestroy:
        if (!s) return v == Verb::kDelete ? ENOENT : 0;
        if (SetInUse(x.name)) return EBUSY;
        t_->elements.erase(x.name);
        std::erase_if(t_->sets, [&](const Set& y) { return y.name == x.name; });
        return 0;
      case Verb::kFlush:
        if (!s) return ENOENT;
        t_->elements.erase(x.name);
        return 0;
    }
    return EINVAL;
  }

  int CheckElement(const Set& s, const Element& e) {
    if (e.key.size() != s.key_len) return EINVAL;
    if (!e.key_end.empty() && (e.key_end.size() != s.key_len || !(s.flags & NFT_SET_INTERVAL))) return EINVAL;
    if ((e.flags & NFT_SET_ELEM_INTERVAL_END) && !(s.flags & NFT_SET_INTERVAL)) return EINVAL;
    if (e.timeout_ms && !(s.flags & NFT_SET_TIMEOUT)) return EINVAL;
    const bool map = s.flags & NFT_SET_MAP;
    const bool has_data = e.verdict || !e.data.empty();
    // The end half of a one-field range carries no data.
    if (map && !(e.flags & NFT_SET_ELEM_INTERVAL_END)) {
      if (!has_data) return EINVAL;
      if (s.data_type == kTypeVerdict ? !e.verdict : e.data.size() != s.data_len) return EINVAL;
      if (e.verdict && (e.verdict->code == NFT_JUMP || e.verdict->code == NFT_GOTO)) {
        const Chain* target = FindNamed(t_->chains, e.verdict->chain);
        if (!target) return ENOENT;
        if (target->hook) return EOPNOTSUPP;
      }
    } else if (!map && has_data) {
      return EINVAL;
    }
    return 0;
  }

  int OnElements(Verb v, const Elements& in) {
    Elements x{Resolve(in.set), {}};
    const Set* s = FindNamed(t_->sets, x.set);
    if (!s) return ENOENT;
    // A constant set's elements come in the transaction that adds it.
    if ((s->flags & NFT_SET_CONSTANT) && !anon_.count(in.set)) return EBUSY;
    auto& list = t_->elements[x.set];
    for (const Element& e : in.elems) {
      auto it = std::find_if(list.begin(), list.end(), [&](const Element& y) { return SameElement(y, e); });
      switch (v) {
        case Verb::kAdd:
        case Verb::kCreate:
          if (int err = CheckElement(*s, e)) return err;
          if (it != list.end()) {
            if (!SameData(*it, e)) return EEXIST;  // Linux 6.x; older kernels said EBUSY
            if (v == Verb::kCreate) return EEXIST;
            continue;
          }
          list.push_back(e);
          break;
        case Verb::kDelete:
        case Verb::kDestroy:
          if (it == list.end()) {
            if (v == Verb::kDelete) return ENOENT;
            continue;
          }
          list.erase(it);
          break;
        case Verb::kFlush:
          return EINVAL;
      }
    }
    if (list.empty()) t_->elements.erase(x.set);
    return 0;
  }

  // A named counter or limit: `list` holds them, `Ref` is what names one
  // in a rule (a delete of one a rule names is EBUSY).
  template <typename Ref, typename T>
  int OnNamed(Verb v, const T& x, std::vector<T>& list) {
    T* have = FindNamed(list, x.name);
    switch (v) {
      case Verb::kAdd:
      case Verb::kCreate:
        if (have) return v == Verb::kCreate ? EEXIST : 0;
        list.push_back(x);
        return 0;
      case Verb::kDelete:
      case Verb::kDestroy:
        if (!have) return v == Verb::kDelete ? ENOENT : 0;
        for (const auto& r : t_->rules)
          for (const auto& e : r.exprs)
            if (const auto* ref = std::get_if<Ref>(&e); ref && ref->name == x.name) return EBUSY;
        std::erase_if(list, [&](const T& y) { return y.name == x.name; });
        return 0;
      case Verb::kFlush:
        return EINVAL;
    }
    return EINVAL;
  }
  int OnCounter(Verb v, const NamedCounter& x) { return OnNamed<CounterRef>(v, x, t_->counters); }
  int OnLimit(Verb v, const NamedLimit& x) {
    if ((v == Verb::kAdd || v == Verb::kCreate) && (x.rate == 0 || x.unit == 0)) return EINVAL;
    return OnNamed<LimitRef>(v, x, t_->limits);
  }

  TableState* t_;
  bool* exists_;
  uint64_t* handle_;
  std::map<std::string, std::string> anon_;  // the transaction's names of its anonymous sets
};

}  // namespace

Status Fake::Apply(const Transaction& tx) {
  if (tx.empty()) return Status::Ok();
  const auto key = std::make_pair(tx.family(), tx.table());
  auto it = tables_.find(key);
  bool exists = it != tables_.end();
  // A copy: committed only when every op succeeds, as the kernel's batch.
  TableState state = exists ? it->second : TableState{tx.family(), {}, {}, {}, {}, {}, {}, {}};
  uint64_t handle = handles_[key];
  Applier a(&state, &exists, &handle);
  for (size_t i = 0; i < tx.ops().size(); ++i) {
    const Op& op = tx.ops()[i];
    if (const auto* t = std::get_if<Table>(&op.object); t && t->name != tx.table())
      return ++failed_, OpError(RenderOp(tx.family(), tx.table(), op) + kNothingApplied, EINVAL);
    if (int err = a.Apply(op)) {
      ++failed_;
      return OpError(RenderOp(tx.family(), tx.table(), op, state.sets) + kNothingApplied, err);
    }
  }
  if (exists) tables_[key] = std::move(state);
  else tables_.erase(key);
  handles_[key] = handle;
  committed_.push_back(tx);
  return Status::Ok();
}

Result<TableState> Fake::Dump(Family family, const std::string& table) {
  auto it = tables_.find({family, table});
  if (it == tables_.end()) return OpError("get table " + FamilyName(family) + " " + table, ENOENT);
  return it->second;
}

}  // namespace weft::sys::nft
