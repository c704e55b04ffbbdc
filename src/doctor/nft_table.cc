#include "doctor/nft_table.h"

#include <algorithm>
#include <cctype>

#include "policy/netpol_nft.h"
#include "sys/nft_fake.h"
#include "sys/nft_json.h"
#include "sys/nft_render.h"

namespace weft::doctor {
namespace {

std::string_view TrimWs(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "a, b,\n c" -> {"a", "b", "c"}.
std::vector<std::string> SplitElements(std::string_view s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string_view::npos) comma = s.size();
    std::string_view e = TrimWs(s.substr(pos, comma - pos));
    if (!e.empty()) out.emplace_back(e);
    pos = comma + 1;
  }
  return out;
}

// "counter packets 12 bytes 3400" -> "counter": the kernel counts, the
// desired ruleset does not.
std::string DropCounterValues(std::string rule) {
  size_t at = 0;
  while ((at = rule.find("counter packets ", at)) != std::string::npos) {
    size_t p = at + 16;
    size_t e1 = rule.find(' ', p);
    if (e1 == std::string::npos || !IsDigits(std::string_view(rule).substr(p, e1 - p)) ||
        rule.compare(e1, 7, " bytes ") != 0) {
      at = p;
      continue;
    }
    size_t q = e1 + 7;
    size_t e2 = q;
    while (e2 < rule.size() && rule[e2] >= '0' && rule[e2] <= '9') ++e2;
    if (e2 == q) {
      at = p;
      continue;
    }
    rule.erase(at + 7, e2 - (at + 7));  // keep "counter"
    at += 7;
  }
  return rule;
}

// Sorts the elements of each anonymous set ("{ 443, 80 }") outside quotes:
// a constant hash set prints in hash order.
std::string SortAnonymousSets(const std::string& rule) {
  std::string out;
  bool quoted = false;
  for (size_t i = 0; i < rule.size(); ++i) {
    char c = rule[i];
    if (c == '"') quoted = !quoted;
    if (quoted || c != '{') {
      out += c;
      continue;
    }
    size_t close = rule.find('}', i);
    if (close == std::string::npos) {
      out += rule.substr(i);
      break;
    }
    auto elems = SplitElements(std::string_view(rule).substr(i + 1, close - i - 1));
    std::sort(elems.begin(), elems.end());
    out += "{ ";
    for (size_t k = 0; k < elems.size(); ++k) out += (k ? ", " : "") + elems[k];
    out += " }";
    i = close;
  }
  return out;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// "10.0.0.1 : jump in-x" -> {"10.0.0.1", "jump in-x"}.
std::pair<std::string, std::string> SplitEntry(const std::string& e) {
  size_t c = e.find(" : ");
  if (c == std::string::npos) return {e, ""};
  return {e.substr(0, c), e.substr(c + 3)};
}

}  // namespace

namespace {

// ParseNftTable's state machine, fed one trimmed line at a time: before the
// table, between its blocks, inside a chain, set/map or stateful object, or
// inside an "elements = { ..." wrapped over several lines.
class TableParser {
 public:
  Status Line(std::string_view line);
  // True once the table's closing brace was read.
  bool done() const { return done_; }
  Result<NftTable> Finish();

 private:
  enum class Block { kNone, kChain, kSet, kObject };

  Status OpenBlock(std::string_view line);
  void ChainLine(std::string_view line);
  void SetLine(std::string_view line);
  void ContinueElements(std::string_view line);

  NftTable t_;
  bool in_table_ = false, done_ = false;
  Block block_ = Block::kNone;
  std::string name_;         // of the current block
  bool collecting_ = false;  // inside "elements = { ..." over several lines
  std::string elements_;
};

Status TableParser::Line(std::string_view line) {
  if (collecting_) {
    ContinueElements(line);
    return Status::Ok();
  }
  if (line.empty() || line[0] == '#') return Status::Ok();
  if (!in_table_) {
    if (StartsWith(line, "table ") && line.back() == '{') {
      in_table_ = true;
      t_.name = std::string(TrimWs(line.substr(6, line.size() - 7)));
    }
    return Status::Ok();
  }
  if (block_ == Block::kNone) {
    if (line == "}") {
      done_ = true;
      return Status::Ok();
    }
    return OpenBlock(line);
  }
  if (line == "}") {
    block_ = Block::kNone;
    return Status::Ok();
  }
  switch (block_) {
    case Block::kChain:
      ChainLine(line);
      break;
    case Block::kSet:
      SetLine(line);
      break;
    case Block::kObject:
    case Block::kNone:
      break;  // a counter's values, a quota's state: not compared
  }
  return Status::Ok();
}

// "chain NAME {", "set NAME {", "map NAME {", "counter NAME {" or a
// one-line "counter NAME { }".
Status TableParser::OpenBlock(std::string_view line) {
  if (line.back() != '{' && line.back() != '}')
    return Status::Error(Reason::kMalformed, Domain::kNone,
                         "nft table " + t_.name + ": unexpected line", std::string(line));
  std::string_view head = TrimWs(line.substr(0, line.find('{')));
  size_t sp = head.rfind(' ');
  if (sp == std::string_view::npos)
    return Status::Error(Reason::kMalformed, Domain::kNone,
                         "nft table " + t_.name + ": unexpected line", std::string(line));
  std::string_view kind = head.substr(0, sp);
  name_ = std::string(head.substr(sp + 1));
  if (name_.size() >= 2 && name_.front() == '"' && name_.back() == '"') name_ = name_.substr(1, name_.size() - 2);
  if (kind == "chain") {
    t_.chains[name_];
    block_ = Block::kChain;
  } else if (kind == "set" || kind == "map") {
    t_.sets[name_].map = kind == "map";
    block_ = Block::kSet;
  } else {
    t_.objects.insert(std::string(kind) + " " + name_);
    block_ = Block::kObject;
  }
  if (line.back() == '}') block_ = Block::kNone;  // one line
  return Status::Ok();
}

void TableParser::ChainLine(std::string_view line) {
  NftChain& c = t_.chains[name_];
  if (c.rules.empty() && c.hook.empty() && StartsWith(line, "type ") && line.find(" hook ") != std::string_view::npos)
    c.hook = std::string(line);
  else
    c.rules.push_back(SortAnonymousSets(DropCounterValues(std::string(line))));
}

void TableParser::SetLine(std::string_view line) {
  if (StartsWith(line, "elements = {")) {
    std::string_view rest = line.substr(12);
    size_t close = rest.find('}');
    elements_ = std::string(rest.substr(0, close));
    if (close == std::string_view::npos) {
      collecting_ = true;
    } else {
      for (auto& e : SplitElements(elements_)) t_.sets[name_].elements.insert(std::move(e));
    }
    return;
  }
  // "type ipv4_addr; flags interval;" (a script) or one per line (nft's listing).
  size_t p = 0;
  while (p < line.size()) {
    size_t semi = line.find(';', p);
    if (semi == std::string_view::npos) semi = line.size();
    std::string_view d = TrimWs(line.substr(p, semi - p));
    if (!d.empty()) t_.sets[name_].decl.emplace_back(d);
    p = semi + 1;
  }
}

void TableParser::ContinueElements(std::string_view line) {
  size_t close = line.find('}');
  elements_ += ' ';
  elements_ += line.substr(0, close);
  if (close != std::string_view::npos) {
    collecting_ = false;
    for (auto& e : SplitElements(elements_)) t_.sets[name_].elements.insert(std::move(e));
  }
}

Result<NftTable> TableParser::Finish() {
  if (!in_table_) return Status::Error(Reason::kMalformed, Domain::kNone, "no nft table in the text");
  if (!done_ || collecting_ || block_ != Block::kNone)
    return Status::Error(Reason::kMalformed, Domain::kNone, "nft table " + t_.name + " is not terminated");
  return std::move(t_);
}

}  // namespace

Result<NftTable> ParseNftTable(std::string_view text) {
  TableParser parser;
  size_t pos = 0;
  while (pos < text.size() && !parser.done()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    WEFT_RETURN_IF_ERROR(parser.Line(TrimWs(text.substr(pos, end - pos))));
    pos = end + 1;
  }
  return parser.Finish();
}

NftTableDiff DiffNftTables(const NftTable& want, const NftTable& have) {
  NftTableDiff d;
  for (const auto& o : want.objects)
    if (!have.objects.count(o)) d.missing_objects.push_back(o);
  for (const auto& o : have.objects)
    if (!want.objects.count(o)) d.extra_objects.push_back(o);

  for (const auto& [name, c] : want.chains)
    if (!have.chains.count(name)) d.missing_chains.push_back({name, c.rules.size(), false});
  for (const auto& [name, c] : have.chains)
    if (!want.chains.count(name)) d.extra_chains.push_back({name, c.rules.size(), false});
  for (const auto& [name, w] : want.chains) {
    auto it = have.chains.find(name);
    if (it == have.chains.end()) continue;
    const NftChain& h = it->second;
    if (w.hook != h.hook)
      d.changed_hooks.push_back(name + ": the kernel has `" + (h.hook.empty() ? "no hook" : h.hook) +
                                "`, weftd wants `" + (w.hook.empty() ? "no hook" : w.hook) + "`");
    std::map<std::string, int> count;
    for (const auto& r : h.rules) ++count[r];
    size_t before = d.missing_rules.size();
    for (const auto& r : w.rules)
      if (count[r]-- <= 0) d.missing_rules.push_back({name, r});
    count.clear();
    for (const auto& r : w.rules) ++count[r];
    size_t extra_before = d.extra_rules.size();
    for (const auto& r : h.rules)
      if (count[r]-- <= 0) d.extra_rules.push_back({name, r});
    if (d.missing_rules.size() == before && d.extra_rules.size() == extra_before && w.rules != h.rules)
      d.reordered_chains.push_back(name);
  }

  for (const auto& [name, s] : want.sets)
    if (!have.sets.count(name)) d.missing_sets.push_back({name, s.elements.size(), s.map});
  for (const auto& [name, s] : have.sets)
    if (!want.sets.count(name)) d.extra_sets.push_back({name, s.elements.size(), s.map});
  for (const auto& [name, w] : want.sets) {
    auto it = have.sets.find(name);
    if (it == have.sets.end()) continue;
    const NftSet& h = it->second;
    if (w.decl != h.decl || w.map != h.map)
      d.changed_sets.push_back(std::string(w.map ? "map " : "set ") + name + ": the kernel declares `" +
                               (h.map ? "map " : "set ") + Join(h.decl, "; ") + "`, weftd wants `" +
                               (w.map ? "map " : "set ") + Join(w.decl, "; ") + "`");
    if (!w.map) {
      for (const auto& e : w.elements)
        if (!h.elements.count(e)) d.missing_elements.push_back({name, e});
      for (const auto& e : h.elements)
        if (!w.elements.count(e)) d.extra_elements.push_back({name, e});
      continue;
    }
    std::map<std::string, std::string> wm, hm;
    for (const auto& e : w.elements) wm.insert(SplitEntry(e));
    for (const auto& e : h.elements) hm.insert(SplitEntry(e));
    for (const auto& [k, v] : wm) {
      auto hv = hm.find(k);
      if (hv == hm.end())
        d.missing_entries.push_back({name, k + " : " + v});
      else if (hv->second != v)
        d.wrong_entries.push_back({name, k, v, hv->second});
    }
    for (const auto& [k, v] : hm)
      if (!wm.count(k)) d.extra_entries.push_back({name, k + " : " + v});
  }
  return d;
}

bool NftTableDiff::empty() const {
  return missing_chains.empty() && extra_chains.empty() && changed_hooks.empty() && missing_rules.empty() &&
         extra_rules.empty() && reordered_chains.empty() && missing_sets.empty() && extra_sets.empty() &&
         changed_sets.empty() && missing_elements.empty() && extra_elements.empty() && missing_entries.empty() &&
         extra_entries.empty() && wrong_entries.empty() && missing_objects.empty() && extra_objects.empty();
}

std::string NftTableDiff::Summary() const {
  std::vector<std::string> parts;
  auto add = [&](size_t n, const char* what) {
    if (n) parts.push_back(std::to_string(n) + " " + what);
  };
  add(missing_chains.size(), "chain(s) missing");
  add(extra_chains.size(), "extra chain(s)");
  add(changed_hooks.size(), "base chain(s) hooked differently");
  add(missing_rules.size(), "rule(s) missing");
  add(extra_rules.size(), "extra rule(s)");
  add(reordered_chains.size(), "chain(s) with their rules in another order");
  add(missing_sets.size(), "set(s)/map(s) missing");
  add(extra_sets.size(), "extra set(s)/map(s)");
  add(changed_sets.size(), "set(s)/map(s) declared differently");
  add(missing_elements.size(), "set element(s) missing");
  add(extra_elements.size(), "extra set element(s)");
  add(missing_entries.size(), "map entry(ies) missing");
  add(extra_entries.size(), "extra map entry(ies)");
  add(wrong_entries.size(), "map entry(ies) with another verdict");
  add(missing_objects.size(), "object(s) missing");
  add(extra_objects.size(), "extra object(s)");
  return Join(parts, ", ");
}

std::vector<std::string> NftTableDiff::Lines() const {
  std::vector<std::string> out;
  const std::string kNotWanted = " is in the kernel but not in weftd's ruleset";
  for (const auto& c : missing_chains)
    out.push_back("chain " + c.name + " is missing (" + std::to_string(c.size) + " rule(s))");
  for (const auto& c : extra_chains)
    out.push_back("chain " + c.name + kNotWanted + " (" + std::to_string(c.size) + " rule(s))");
  for (const auto& h : changed_hooks) out.push_back("chain " + h);
  for (const auto& r : missing_rules) out.push_back("chain " + r.where + ": missing rule: " + r.what);
  for (const auto& r : extra_rules) out.push_back("chain " + r.where + ": extra rule: " + r.what);
  for (const auto& c : reordered_chains) out.push_back("chain " + c + ": the same rules in another order");
  auto kind = [](bool map) { return std::string(map ? "map " : "set "); };
  for (const auto& s : missing_sets)
    out.push_back(kind(s.map) + s.name + " is missing (" + std::to_string(s.size) +
                  (s.map ? " entry(ies))" : " element(s))"));
  for (const auto& s : extra_sets)
    out.push_back(kind(s.map) + s.name + kNotWanted + " (" + std::to_string(s.size) +
                  (s.map ? " entry(ies))" : " element(s))"));
  for (const auto& s : changed_sets) out.push_back(s);
  for (const auto& e : missing_elements) out.push_back("set " + e.where + ": missing element " + e.what);
  for (const auto& e : extra_elements) out.push_back("set " + e.where + ": extra element " + e.what);
  for (const auto& e : missing_entries) out.push_back("map " + e.where + ": missing entry " + e.what);
  for (const auto& e : extra_entries) out.push_back("map " + e.where + ": extra entry " + e.what);
  for (const auto& e : wrong_entries)
    out.push_back("map " + e.map + ": " + e.key + " : " + e.have + " in the kernel, weftd wants " + e.want);
  for (const auto& o : missing_objects) out.push_back(o + " is missing");
  for (const auto& o : extra_objects) out.push_back(o + kNotWanted);
  return out;
}

Result<sys::nft::Transaction> NetpolRulesetTransaction(const std::string& body) {
  WEFT_ASSIGN_OR_RETURN(auto tx, sys::nft::ParseTransactionJson(body));
  if (tx.family() != sys::nft::Family::kInet || tx.table() != policy::netpol::kTable)
    return Status::Error(Reason::kMalformed, Domain::kFirewall,
                         std::string("weftd's ruleset is not table inet ") + policy::netpol::kTable);
  return tx;
}

Result<NftTable> NetpolRulesetTable(const std::string& body) {
  WEFT_ASSIGN_OR_RETURN(auto tx, NetpolRulesetTransaction(body));
  sys::nft::Fake fake;
  WEFT_RETURN_IF_ERROR(fake.Apply(tx));
  WEFT_ASSIGN_OR_RETURN(auto t, fake.Dump(sys::nft::Family::kInet, policy::netpol::kTable));
  return ParseNftTable(sys::nft::RenderTable(t));
}

}  // namespace weft::doctor
