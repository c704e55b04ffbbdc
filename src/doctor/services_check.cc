#include "doctor/services_check.h"

#include <algorithm>
#include <iterator>

#include "sys/nft_fake.h"
#include "sys/nft_json.h"
#include "sys/nft_render.h"

namespace weft::doctor {
namespace {

namespace nft = sys::nft;

std::string ElementText(const nft::Set* set, const nft::Element& e) {
  return set ? nft::RenderElement(*set, e) : "element of " + std::to_string(e.key.size()) + " byte(s)";
}

}  // namespace

std::string ServiceOfObject(const std::string& name) {
  // <kind><4|6>-<8 base32>-<ns>/<name>/<proto>/<port>[__<endpoint>]
  static const char* kKinds[] = {"svc", "local", "ext", "ep", "aff"};
  for (const char* kind : kKinds) {
    const std::string k = kind;
    if (name.size() < k.size() + 11 || name.compare(0, k.size(), k) != 0) continue;
    const char fam = name[k.size()];
    if ((fam != '4' && fam != '6') || name[k.size() + 1] != '-' || name[k.size() + 10] != '-') continue;
    const std::string rest = name.substr(k.size() + 11);
    const size_t a = rest.find('/');
    if (a == std::string::npos || a == 0) continue;
    const size_t b = rest.find('/', a + 1);
    return rest.substr(0, b);  // a name cut at nft's limit may end inside the Service's name
  }
  return "";
}

std::vector<ServiceDiff> DiffServicesTables(const services::TableDigest& want, const services::TableDigest& have) {
  std::map<std::string, std::vector<std::string>> by;
  auto add = [&](const std::string& service, std::string line) { by[service].push_back(std::move(line)); };

  for (const auto& [name, hook] : want.chains) {
    auto it = have.chains.find(name);
    if (it == have.chains.end()) {
      const size_t n = want.rules.count(name) ? want.rules.at(name).size() : 0;
      add(ServiceOfObject(name), "chain " + name + " is missing (" + std::to_string(n) + " rule(s))");
    } else if (!(it->second == hook)) {
      add(ServiceOfObject(name), "chain " + name + ": the kernel's hook differs from weftd's");
    }
  }
  for (const auto& [name, hook] : have.chains)
    if (!want.chains.count(name)) add(ServiceOfObject(name), "chain " + name + " is left over (weftd does not want it)");
  static const std::vector<nft::Rule> kNone;
  for (const auto& [name, rules] : want.rules) {
    if (!have.chains.count(name)) continue;
    auto it = have.rules.find(name);
    const std::vector<nft::Rule>& got = it == have.rules.end() ? kNone : it->second;
    if (got == rules) continue;
    auto text = [](const nft::Rule& r) { return nft::RenderRule(nft::Family::kInet, r); };
    std::vector<std::string> w, h;
    for (const auto& r : rules) w.push_back(text(r));
    for (const auto& r : got) h.push_back(text(r));
    std::vector<std::string> ws = w, hs = h;
    std::sort(ws.begin(), ws.end());
    std::sort(hs.begin(), hs.end());
    if (ws == hs) {
      add(ServiceOfObject(name), "chain " + name + ": the same rules in another order");
      continue;
    }
    std::vector<std::string> missing, extra;
    std::set_difference(ws.begin(), ws.end(), hs.begin(), hs.end(), std::back_inserter(missing));
    std::set_difference(hs.begin(), hs.end(), ws.begin(), ws.end(), std::back_inserter(extra));
    for (const auto& r : missing) add(ServiceOfObject(name), "chain " + name + ": rule missing: " + r);
    for (const auto& r : extra) add(ServiceOfObject(name), "chain " + name + ": rule extra (stale): " + r);
  }

  for (const auto& [name, set] : want.sets) {
    auto it = have.sets.find(name);
    if (it == have.sets.end()) add(ServiceOfObject(name), "set " + name + " is missing");
    else if (!(it->second == set)) add(ServiceOfObject(name), "set " + name + ": declared differently");
  }
  for (const auto& [name, set] : have.sets)
    if (!want.sets.count(name)) add(ServiceOfObject(name), "set " + name + " is left over (weftd does not want it)");

  // Map elements by key; each put down to the Service of the chain it goes to.
  auto owner = [&](const std::string& map, const nft::Element& e) {
    std::string s = e.verdict ? ServiceOfObject(e.verdict->chain) : "";
    if (s.empty() && map.rfind("no-endpoint-", 0) == 0) s = "?";
    return s;
  };
  for (const auto& [name, elems] : want.elements) {
    if (!have.sets.count(name)) continue;  // the set itself is reported
    const nft::Set* set = &want.sets.at(name);
    std::map<std::string, const nft::Element*> w, h;
    for (const auto& e : elems) w[e.key + '\0' + e.key_end] = &e;
    if (auto it = have.elements.find(name); it != have.elements.end())
      for (const auto& e : it->second) h[e.key + '\0' + e.key_end] = &e;
    for (const auto& [k, e] : w) {
      auto it = h.find(k);
      if (it == h.end()) add(owner(name, *e), "map " + name + ": element missing: " + ElementText(set, *e));
      else if (!(it->second->verdict == e->verdict) || it->second->data != e->data)
        add(owner(name, *e), "map " + name + ": element " + ElementText(set, *e) + " is " +
                                  ElementText(set, *it->second) + " in the kernel");
    }
    for (const auto& [k, e] : h)
      if (!w.count(k))
        add(owner(name, *e), "map " + name + ": element extra (stale): " + ElementText(set, *e));
  }

  std::vector<ServiceDiff> out;
  for (auto& [service, lines] : by) out.push_back({service, std::move(lines)});
  return out;
}

Result<sys::nft::Transaction> ServicesRulesetTransaction(const std::string& body) {
  WEFT_ASSIGN_OR_RETURN(auto tx, nft::ParseTransactionJson(body));
  if (tx.family() != nft::Family::kInet || tx.table() != services::kTable)
    return Status::Error(Reason::kMalformed, Domain::kFirewall,
                         std::string("weftd's Service ruleset is not table ") + kServicesTable);
  return tx;
}

Result<services::TableDigest> ServicesRulesetDigest(const std::string& body) {
  WEFT_ASSIGN_OR_RETURN(auto tx, ServicesRulesetTransaction(body));
  nft::Fake fake;
  WEFT_RETURN_IF_ERROR(fake.Apply(tx));
  WEFT_ASSIGN_OR_RETURN(auto t, fake.Dump(nft::Family::kInet, services::kTable));
  return services::DigestOf(t);
}

}  // namespace weft::doctor
