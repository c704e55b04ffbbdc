#include "doctor/policy.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace weft::doctor {
namespace {

using nlohmann::json;

std::vector<std::string> Strings(const json& o, const char* key) {
  std::vector<std::string> out;
  auto it = o.find(key);
  if (it == o.end() || !it->is_array()) return out;
  for (const auto& v : *it)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

bool Bool(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() && it->get<bool>();
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(' ') - b + 1);
}

bool EndsWithWord(const std::string& s, const std::string& w) {
  return s == w ||
         (s.size() > w.size() && s.compare(s.size() - w.size(), w.size(), w) == 0 && s[s.size() - w.size() - 1] == ' ');
}

std::string JoinComma(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

void RenderDirection(std::ostringstream& out, const char* dir, bool isolated, const std::vector<std::string>& policies,
                     const std::vector<std::string>& rules, bool ingress, const NftTable* ruleset, size_t max_elements,
                     std::set<std::string>* shown_sets) {
  out << "  " << dir << ":" << std::string(10 - std::string(dir).size(), ' ');
  if (!isolated) {
    out << "not isolated: no policy selects it for " << dir << ", all " << (ingress ? "incoming" : "outgoing")
        << " traffic is allowed\n";
    return;
  }
  out << "isolated by " << JoinComma(policies) << "\n";
  if (rules.empty()) {
    out << "    (weftd reported no rules)\n";
    return;
  }
  std::vector<RuleLine> lines;
  size_t width = 0;
  for (const auto& r : rules) {
    RuleLine l = DescribeRule(r, ingress);
    if (l.match.empty()) l.match = l.verdict == "deny" ? "everything else" : "everything";
    width = std::max(width, l.match.size());
    lines.push_back(std::move(l));
  }
  width = std::min<size_t>(width, 64);
  for (size_t i = 0; i < lines.size(); ++i) {
    const RuleLine& l = lines[i];
    std::string verdict = l.verdict;
    verdict.resize(std::max<size_t>(verdict.size(), 6), ' ');
    out << "    " << verdict << " " << l.match;
    if (!l.note.empty())
      out << std::string(width > l.match.size() ? width - l.match.size() : 0, ' ') << "  # " << l.note;
    out << "\n";
    if (!ruleset) continue;
    for (const auto& name : RuleSetRefs(rules[i])) {
      if (!shown_sets->insert(name).second) continue;
      auto it = ruleset->sets.find(name);
      if (it == ruleset->sets.end()) continue;
      const auto& elems = it->second.elements;
      out << "           @" << name << " = { ";
      size_t n = 0;
      for (const auto& e : elems) {
        if (n == max_elements) break;
        out << (n++ ? ", " : "") << e;
      }
      out << " }";
      if (elems.empty())
        out << " (empty: matches nothing)";
      else if (elems.size() > max_elements)
        out << " ... " << elems.size() << " element(s) in all";
      out << "\n";
    }
  }
}

}  // namespace

Result<std::vector<PolicyPod>> ParsePolicyPods(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const std::exception& e) {
    return Status::Error(Reason::kMalformed, Domain::kNone, "weftd's /netpol answer is not JSON", e.what());
  }
  if (!j.is_array()) return Status::Error(Reason::kMalformed, Domain::kNone,
                                          "weftd's /netpol answer is not a JSON array");
  std::vector<PolicyPod> out;
  for (const auto& o : j) {
    if (!o.is_object() || !o.contains("pod") || !o["pod"].is_string())
      return Status::Error(Reason::kMalformed, Domain::kNone,
                           "weftd's /netpol answer has an entry without \"pod\"", o.dump());
    PolicyPod p;
    p.pod = o["pod"].get<std::string>();
    p.ips = Strings(o, "ips");
    p.isolated_ingress = Bool(o, "isolatedIngress");
    p.isolated_egress = Bool(o, "isolatedEgress");
    p.ingress_policies = Strings(o, "ingressPolicies");
    p.egress_policies = Strings(o, "egressPolicies");
    p.ingress_rules = Strings(o, "ingressRules");
    p.egress_rules = Strings(o, "egressRules");
    p.node_rules = Strings(o, "nodeRules");  // older weftd: absent
    p.raw = o;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::string> RuleSetRefs(const std::string& rule) {
  std::vector<std::string> out;
  bool quoted = false;
  for (size_t i = 0; i < rule.size(); ++i) {
    if (rule[i] == '"') quoted = !quoted;
    if (quoted || rule[i] != '@') continue;
    size_t e = i + 1;
    while (e < rule.size() && rule[e] != ' ' && rule[e] != ',' && rule[e] != '}') ++e;
    std::string name = rule.substr(i + 1, e - i - 1);
    if (!name.empty() && std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    i = e;
  }
  return out;
}

RuleLine DescribeRule(const std::string& rule, bool ingress) {
  RuleLine l;
  std::string r = Trim(rule);
  // The comment is the rule's last statement: ... comment "x/allow-b ingress 0".
  size_t c = r.rfind(" comment \"");
  if (c == std::string::npos && r.rfind("comment \"", 0) == 0) c = 0;
  if (c != std::string::npos && r.back() == '"') {
    size_t from = r.find('"', c) + 1;
    l.note = r.substr(from, r.size() - 1 - from);
    r = Trim(r.substr(0, c));
  }
  struct V {
    const char* word;
    const char* plain;
  };
  const V verdicts[] = {
      {"accept", "allow"}, {"return", ingress ? "return" : "allow"}, {"drop", "deny"}, {"reject", "deny"}};
  // The table's drop chains record, count and drop (netpol_model.h kDropChains).
  for (const char* d : {"goto drop-in", "goto drop-eg", "goto rdrop-in", "goto rdrop-eg", "goto pending-in",
                        "goto pending-eg"}) {
    if (!EndsWithWord(r, d)) continue;
    l.verdict = "deny";
    if (l.note.empty())
      l.note = std::string("counted in ") + (std::string(d).find("-in") != std::string::npos ? "drop-ingress" : "drop-egress") +
               ", recorded (weftctl policy drops)";
    l.match = Trim(r.substr(0, r.size() - std::string(d).size()));
    return l;
  }
  for (const auto& v : verdicts) {
    if (!EndsWithWord(r, v.word)) continue;
    l.verdict = v.plain;
    r = Trim(r.substr(0, r.size() - std::string(v.word).size()));
    break;
  }
  // A named counter is bookkeeping: say which counter in the note.
  size_t k = r.find("counter name \"");
  if (k != std::string::npos) {
    size_t from = k + 14;
    size_t to = r.find('"', from);
    if (to != std::string::npos) {
      std::string counter = r.substr(from, to - from);
      r = Trim(r.substr(0, k) + r.substr(to + 1));
      if (l.note.empty()) l.note = "counted in " + counter;
    }
  }
  l.match = r;
  return l;
}

std::string RenderPolicyText(const std::vector<PolicyPod>& pods, const NftTable* ruleset, size_t max_elements) {
  std::ostringstream out;
  bool first = true;
  for (const auto& p : pods) {
    if (!first) out << "\n";
    first = false;
    std::set<std::string> shown;
    out << "pod " << p.pod << "\n";
    out << "  addresses: " << (p.ips.empty() ? "(none)" : JoinComma(p.ips)) << "\n";
    RenderDirection(out, "ingress", p.isolated_ingress, p.ingress_policies, p.ingress_rules, true, ruleset,
                    max_elements, &shown);
    RenderDirection(out, "egress", p.isolated_egress, p.egress_policies, p.egress_rules, false, ruleset, max_elements,
                    &shown);
    // Its traffic to its own node (input hook): the tiers only.
    if (!p.node_rules.empty()) {
      std::vector<std::string> tiers;
      for (const auto& name : p.egress_policies)
        if (name.rfind("Admin:", 0) == 0 || name.rfind("Baseline:", 0) == 0) tiers.push_back(name);
      RenderDirection(out, "to node", true, tiers, p.node_rules, false, ruleset, max_elements, &shown);
    }
  }
  return out.str();
}

std::optional<bool> NetpolReadyMetric(const std::string& metrics) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("weft_netpol_ready ", 0) != 0) continue;
    std::string v = Trim(line.substr(18));
    return v != "0";
  }
  return std::nullopt;
}

}  // namespace weft::doctor
