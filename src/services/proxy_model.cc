#include "services/proxy_model.h"

#include <linux/netfilter/nf_tables.h>

#include <algorithm>

#include "sys/nft_fake.h"
#include "sys/nft_render.h"

namespace weft::services {
namespace {

std::optional<nft::Verdict> Effective(const std::map<MapKey, std::map<std::string, nft::Verdict>>& claims,
                                      const MapKey& k) {
  auto it = claims.find(k);
  if (it == claims.end() || it->second.empty()) return std::nullopt;
  return it->second.begin()->second;
}

// Chains that jump or go to others are deleted before those: external,
// then the policy chains, then the endpoints'.
int DeleteRank(const std::string& chain) {
  if (chain.rfind("ext", 0) == 0) return 0;
  if (chain.rfind("ep", 0) == 0) return 2;
  return 1;
}

bool References(const std::vector<TableRule>& rules, const std::string& set) {
  for (const auto& r : rules)
    for (const auto& e : r.rule.exprs) {
      if (const auto* l = std::get_if<nft::Lookup>(&e); l && l->set == set) return true;
      if (const auto* d = std::get_if<nft::Dynset>(&e); d && d->set == set) return true;
    }
  return false;
}

std::string PortKey(const PortState& p) { return std::string(p.v6 ? "6|" : "4|") + p.port_name; }

// The conntrack entries `before` -> `after` of one Service leaves wrong.
std::vector<ConntrackFlush> ConntrackWork(const ServiceObjects& before, const ServiceObjects& after) {
  std::map<std::string, const PortState*> now;
  for (const auto& p : after.ports) now[PortKey(p)] = &p;
  std::vector<ConntrackFlush> out;
  std::set<std::string> seen;
  for (const auto& o : before.ports) {
    if (o.proto != Proto::kUdp) continue;
    auto it = now.find(PortKey(o));
    const PortState* n = it == now.end() ? nullptr : it->second;
    for (const auto& e : o.endpoints) {
      if (n && std::find(n->endpoints.begin(), n->endpoints.end(), e) != n->endpoints.end()) continue;
      for (const auto& vip : o.vips) out.push_back({o.v6, o.proto, vip, o.port, e.ip, e.port});
      if (o.node_port) out.push_back({o.v6, o.proto, std::nullopt, o.node_port, e.ip, e.port});
    }
  }
  std::map<std::string, const PortState*> was;
  for (const auto& p : before.ports) was[PortKey(p)] = &p;
  for (const auto& n : after.ports) {
    if (n.proto != Proto::kUdp || !n.has_endpoints) continue;
    auto it = was.find(PortKey(n));
    if (it != was.end() && it->second->has_endpoints) continue;
    for (const auto& vip : n.vips) out.push_back({n.v6, n.proto, vip, n.port, std::nullopt, 0});
    if (n.node_port) out.push_back({n.v6, n.proto, std::nullopt, n.node_port, std::nullopt, 0});
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

Change Model::UpsertService(Service svc) {
  const std::string key = svc.Key();
  services_.insert_or_assign(key, std::move(svc));
  return Resync(key);
}

Change Model::DeleteService(const std::string& key) {
  if (services_.erase(key) == 0) return Change{};
  return Resync(key);
}

Change Model::UpsertSlice(EndpointSlice slice) {
  const std::string key = slice.Key(), service = slice.ServiceKey();
  Change out;
  // A slice whose service-name label changed leaves its old Service first.
  if (auto it = slice_service_.find(key); it != slice_service_.end() && it->second != service) {
    const std::string old = it->second;
    slices_[old].erase(slice.name);
    if (slices_[old].empty()) slices_.erase(old);
    out = Resync(old);
  }
  slice_service_[key] = service;
  slices_[service].insert_or_assign(slice.name, std::move(slice));
  Change more = Resync(service);
  out.tx.Append(std::move(more.tx));
  out.conntrack.insert(out.conntrack.end(), more.conntrack.begin(), more.conntrack.end());
  std::sort(out.conntrack.begin(), out.conntrack.end());
  out.conntrack.erase(std::unique(out.conntrack.begin(), out.conntrack.end()), out.conntrack.end());
  return out;
}

Change Model::DeleteSlice(const std::string& key) {
  auto it = slice_service_.find(key);
  if (it == slice_service_.end()) return Change{};
  const std::string service = it->second;
  slice_service_.erase(it);
  auto& by_name = slices_[service];
  by_name.erase(key.substr(key.find('/') + 1));
  if (by_name.empty()) slices_.erase(service);
  return Resync(service);
}

std::vector<const EndpointSlice*> Model::SlicesOf(const std::string& key) const {
  std::vector<const EndpointSlice*> out;
  if (auto it = slices_.find(key); it != slices_.end())
    for (const auto& [name, s] : it->second) out.push_back(&s);
  return out;
}

const ServiceObjects* Model::Objects(const std::string& key) const {
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : &it->second;
}

const Service* Model::FindService(const std::string& key) const {
  auto it = services_.find(key);
  return it == services_.end() ? nullptr : &it->second;
}

Change Model::Resync(const std::string& key) {
  static const ServiceObjects kNone;
  ServiceObjects want;
  if (auto s = services_.find(key); s != services_.end()) want = BuildService(s->second, SlicesOf(key), cfg_);
  auto had_it = objects_.find(key);
  const ServiceObjects have = had_it == objects_.end() ? kNone : had_it->second;
  Change out;
  if (have == want) return out;
  out.conntrack = ConntrackWork(have, want);

  // The map keys this Service claimed or claims, and their verdicts before and after.
  std::map<MapKey, std::optional<nft::Verdict>> before;
  for (const ServiceObjects* objs : {&have, static_cast<const ServiceObjects*>(&want)})
    for (const auto& [k, v] : objs->entries) before.emplace(k, Effective(claims_, k));
  for (const auto& [k, v] : have.entries) {
    claims_[k].erase(key);
    if (claims_[k].empty()) claims_.erase(k);
  }
  for (const auto& [k, v] : want.entries) claims_[k][key] = v;

  const auto f = nft::Family::kInet;
  nft::Transaction sets_new(f, kTable), chains_new(f, kTable), flushes(f, kTable), sets_changed(f, kTable),
      rules(f, kTable), elems_del(f, kTable), elems_add(f, kTable), chains_del(f, kTable), sets_del(f, kTable);
  std::set<std::string> changed_sets;
  for (const auto& [name, set] : want.sets) {
    auto h = have.sets.find(name);
    if (h == have.sets.end()) {
      sets_new.Add(set);
    } else if (!(h->second == set)) {
      changed_sets.insert(name);
      sets_changed.Delete(nft::Set{.name = name}).Add(set);
    }
  }
  for (const auto& [name, set] : have.sets)
    if (!want.sets.count(name)) sets_del.Delete(nft::Set{.name = name});

  AnonymousNames anon;
  for (const auto& [name, r] : have.chains) {
    auto w = want.chains.find(name);
    bool refers = false;
    for (const auto& s : changed_sets) refers |= References(r, s);
    // Rewritten, or about to go while it still refers to a set that is replaced.
    if ((w != want.chains.end() && !(w->second == r)) || refers) {
      flushes.Flush(nft::Chain{name});
      if (w != want.chains.end()) AddRules(rules, name, w->second, anon);
    }
  }
  for (const auto& [name, r] : want.chains)
    if (!have.chains.count(name)) {
      chains_new.Add(nft::Chain{name});
      AddRules(rules, name, r, anon);
    }
  std::vector<std::string> gone;
  for (const auto& [name, r] : have.chains)
    if (!want.chains.count(name)) gone.push_back(name);
  std::stable_sort(gone.begin(), gone.end(), [](const auto& a, const auto& b) { return DeleteRank(a) < DeleteRank(b); });
  for (const auto& name : gone) chains_del.Delete(nft::Chain{name});

  std::map<std::string, nft::Elements> dels, adds;
  for (const auto& [k, was] : before) {
    const std::optional<nft::Verdict> now = Effective(claims_, k);
    if (was == now) continue;
    if (was) dels.try_emplace(k.first, nft::Elements{k.first, {}}).first->second.elems.push_back({.key = k.second});
    if (now)
      adds.try_emplace(k.first, nft::Elements{k.first, {}}).first->second.elems.push_back({.key = k.second, .verdict = now});
  }
  for (auto& [m, e] : dels) elems_del.Delete(std::move(e));
  for (auto& [m, e] : adds) elems_add.Add(std::move(e));

  // New sets and chains first (a rule may name any), the old rules out
  // before a set they name is replaced, the maps moved before a chain they
  // pointed to goes, and a set after the rules that named it.
  for (auto* part : {&sets_new, &chains_new, &flushes, &sets_changed, &rules, &elems_del, &elems_add, &chains_del,
                     &sets_del})
    out.tx.Append(std::move(*part));
  if (want.chains.empty() && want.sets.empty() && want.entries.empty() && want.ports.empty()) objects_.erase(key);
  else objects_[key] = std::move(want);
  return out;
}

nft::Transaction Model::Full() const {
  nft::Transaction tx(nft::Family::kInet, kTable);
  tx.Add(nft::Table{kTable}).Delete(nft::Table{kTable}).Add(nft::Table{kTable});
  AddFixedObjects(tx, cfg_);
  for (const auto& [key, objs] : objects_) {
    for (const auto& [name, set] : objs.sets) tx.Add(set);
    for (const auto& [name, rules] : objs.chains) tx.Add(nft::Chain{name});
  }
  AnonymousNames anon;
  for (const auto& [key, objs] : objects_)
    for (const auto& [name, rules] : objs.chains) AddRules(tx, name, rules, anon);
  std::map<std::string, nft::Elements> maps;
  for (const auto& [k, owners] : claims_)
    if (!owners.empty())
      maps.try_emplace(k.first, nft::Elements{k.first, {}})
          .first->second.elems.push_back({.key = k.second, .verdict = owners.begin()->second});
  for (auto& [m, e] : maps) tx.Add(std::move(e));
  return tx;
}

TableDigest Model::Digest() const {
  nft::Fake fake;
  // The model's own objects: a failure here is a bug, and shows as an empty digest that matches no kernel.
  if (!fake.Apply(Full()).ok()) return TableDigest{};
  auto t = fake.Dump(nft::Family::kInet, kTable);
  return t.ok() ? DigestOf(*t) : TableDigest{};
}

TableDigest DigestOf(const nft::TableState& t) {
  TableDigest d;
  std::map<std::string, std::string> inline_sets;
  for (const auto& s : t.sets) {
    auto el = t.elements.find(s.name);
    std::vector<nft::Element> elems = el == t.elements.end() ? std::vector<nft::Element>{} : el->second;
    std::sort(elems.begin(), elems.end(), [](const auto& a, const auto& b) {
      return std::tie(a.key, a.key_end, a.flags) < std::tie(b.key, b.key_end, b.flags);
    });
    for (auto& e : elems) e.timeout_ms = 0;  // what a dump reads is the time left
    if (nft::IsAnonymousSetName(s.name)) {
      std::string text;
      for (const auto& e : elems) text += (text.empty() ? "" : ", ") + nft::RenderElement(s, e);
      inline_sets[s.name] = "{ " + text + " }";
      continue;
    }
    d.sets[s.name] = s;
    if (!(s.flags & NFT_SET_EVAL)) d.elements[s.name] = std::move(elems);
  }
  for (const auto& c : t.chains) {
    d.chains[c.name] = c.hook;
    d.rules[c.name];
  }
  for (nft::Rule r : t.rules) {
    r.handle = 0;
    for (auto& e : r.exprs)
      if (auto* l = std::get_if<nft::Lookup>(&e))
        if (auto it = inline_sets.find(l->set); it != inline_sets.end()) l->set = it->second;
    d.rules[r.chain].push_back(std::move(r));
  }
  return d;
}

std::string TableDigest::Diff(const TableDigest& o) const {
  std::string out;
  for (const auto& [name, hook] : chains)
    if (!o.chains.count(name)) out += "chain " + name + ": only in the first\n";
    else if (!(o.chains.at(name) == hook)) out += "chain " + name + ": hooks differ\n";
  for (const auto& [name, hook] : o.chains)
    if (!chains.count(name)) out += "chain " + name + ": only in the second\n";
  for (const auto& [name, rs] : rules) {
    auto it = o.rules.find(name);
    if (it == o.rules.end() || it->second == rs) continue;
    auto text = [](const std::vector<nft::Rule>& v) {
      std::string s;
      for (const auto& r : v) s += "\t" + nft::RenderRule(nft::Family::kInet, r) + "\n";
      return s;
    };
    out += "chain " + name + " rules differ:\n" + text(rs) + " vs\n" + text(it->second);
  }
  for (const auto& [name, s] : sets)
    if (!o.sets.count(name)) out += "set " + name + ": only in the first\n";
    else if (!(o.sets.at(name) == s)) out += "set " + name + ": declarations differ\n";
  for (const auto& [name, s] : o.sets)
    if (!sets.count(name)) out += "set " + name + ": only in the second\n";
  for (const auto& [name, es] : elements) {
    auto it = o.elements.find(name);
    if (it == o.elements.end() || it->second == es || !sets.count(name)) continue;
    std::string a, b;
    for (const auto& e : es) a += " " + nft::RenderElement(sets.at(name), e);
    for (const auto& e : it->second) b += " " + nft::RenderElement(sets.at(name), e);
    out += "set " + name + " elements differ:" + a + "\n vs" + b + "\n";
  }
  return out;
}

}  // namespace weft::services
