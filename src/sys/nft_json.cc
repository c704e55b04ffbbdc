#include "sys/nft_json.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>

namespace weft::sys::nft {
namespace {

using nlohmann::json;

std::string Hex(const std::string& b) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (unsigned char c : b) {
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}

bool Unhex(const std::string& s, std::string* out) {
  if (s.size() % 2) return false;
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < s.size(); i += 2) {
    const int hi = digit(s[i]), lo = digit(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

// One visitor writes an object's fields, the other reads them back: each
// object's fields are listed once (Fields below), for both.
struct Writer {
  json j = json::object();
  template <class I>
  void Int(const char* name, const I& v) {
    j[name] = v;
  }
  void Bool(const char* name, const bool& v) { j[name] = v; }
  void Str(const char* name, const std::string& v) { j[name] = v; }
  void Bytes(const char* name, const std::string& v) { j[name] = Hex(v); }
  template <class I>
  void OptInt(const char* name, const std::optional<I>& v) {
    if (v) j[name] = *v;
  }
};

struct Reader {
  const json& j;
  std::string error;  // the first field that is not what it should be
  void Fail(const char* name, const char* want) {
    if (error.empty()) error = std::string("field \"") + name + "\" is not " + want;
  }
  template <class I>
  void Int(const char* name, I& v) {
    auto it = j.find(name);
    if (it == j.end()) return;
    if (!it->is_number_integer()) return Fail(name, "an integer");
    if constexpr (std::is_signed_v<I>) {
      const auto x = it->get<int64_t>();
      if (x < std::numeric_limits<I>::min() || x > std::numeric_limits<I>::max()) return Fail(name, "in range");
      v = static_cast<I>(x);
    } else {
      if (it->is_number_unsigned() || it->get<int64_t>() >= 0) {
        const auto x = it->get<uint64_t>();
        if (x > std::numeric_limits<I>::max()) return Fail(name, "in range");
        v = static_cast<I>(x);
      } else {
        Fail(name, "unsigned");
      }
    }
  }
  void Bool(const char* name, bool& v) {
    auto it = j.find(name);
    if (it == j.end()) return;
    if (!it->is_boolean()) return Fail(name, "a boolean");
    v = it->get<bool>();
  }
  void Str(const char* name, std::string& v) {
    auto it = j.find(name);
    if (it == j.end()) return;
    if (!it->is_string()) return Fail(name, "a string");
    v = it->get<std::string>();
  }
  void Bytes(const char* name, std::string& v) {
    auto it = j.find(name);
    if (it == j.end()) return;
    if (!it->is_string() || !Unhex(it->get<std::string>(), &v)) Fail(name, "hex bytes");
  }
  template <class I>
  void OptInt(const char* name, std::optional<I>& v) {
    if (!j.contains(name)) return;
    I x{};
    Int(name, x);
    v = x;
  }
};

template <class V> void Fields(V& v, Meta& x) { v.Int("key", x.key); v.Int("dreg", x.dreg); }
template <class V> void Fields(V& v, Payload& x) {
  v.Int("base", x.base); v.Int("offset", x.offset); v.Int("len", x.len); v.Int("dreg", x.dreg);
}
template <class V> void Fields(V& v, Ct& x) { v.Int("key", x.key); v.Int("dreg", x.dreg); v.OptInt("dir", x.dir); }
template <class V> void Fields(V& v, Cmp& x) { v.Int("op", x.op); v.Bytes("data", x.data); v.Int("sreg", x.sreg); }
template <class V> void Fields(V& v, Bitwise& x) {
  v.Int("sreg", x.sreg); v.Int("dreg", x.dreg); v.Int("len", x.len); v.Bytes("mask", x.mask); v.Bytes("xor", x.xor_);
}
template <class V> void Fields(V& v, Lookup& x) {
  v.Str("set", x.set); v.Int("sreg", x.sreg); v.OptInt("dreg", x.dreg); v.Bool("invert", x.invert);
}
template <class V> void Fields(V& v, Immediate& x) { v.Int("dreg", x.dreg); v.Bytes("data", x.data); }
template <class V> void Fields(V& v, Verdict& x) { v.Int("code", x.code); v.Str("chain", x.chain); }
template <class V> void Fields(V& v, Counter& x) { v.Int("packets", x.packets); v.Int("bytes", x.bytes); }
template <class V> void Fields(V& v, CounterRef& x) { v.Str("name", x.name); }
template <class V> void Fields(V& v, Log& x) {
  v.Str("prefix", x.prefix); v.OptInt("group", x.group); v.Int("snaplen", x.snaplen);
  v.Int("qthreshold", x.qthreshold);
}
template <class V> void Fields(V& v, Nat& x) {
  v.Int("type", x.type); v.Bool("masq", x.masq); v.Int("family", x.family); v.Int("reg_addr", x.reg_addr);
  v.Int("reg_proto", x.reg_proto); v.Int("flags", x.flags);
}
template <class V> void Fields(V& v, Numgen& x) {
  v.Int("type", x.type); v.Int("modulus", x.modulus); v.Int("offset", x.offset); v.Int("dreg", x.dreg);
}
template <class V> void Fields(V& v, Limit& x) {
  v.Int("rate", x.rate); v.Int("unit", x.unit); v.Int("burst", x.burst); v.Int("type", x.type);
  v.Bool("invert", x.invert);
}
template <class V> void Fields(V& v, LimitRef& x) { v.Str("name", x.name); }
template <class V> void Fields(V& v, Fib& x) { v.Int("flags", x.flags); v.Int("result", x.result); v.Int("dreg", x.dreg); }
template <class V> void Fields(V& v, MetaSet& x) { v.Int("key", x.key); v.Int("sreg", x.sreg); }
template <class V> void Fields(V& v, Reject& x) { v.Int("type", x.type); v.Int("code", x.code); }
template <class V> void Fields(V& v, Dynset& x) {
  v.Int("op", x.op); v.Str("set", x.set); v.Int("sreg_key", x.sreg_key); v.Int("timeout_ms", x.timeout_ms);
}

// Expression kinds in Expr's order.
constexpr const char* kExprNames[] = {"meta",    "payload", "ct",      "cmp",     "bitwise", "lookup",
                                      "immediate", "verdict", "counter", "counter_ref", "log", "nat",
                                      "numgen",  "limit",   "limit_ref", "fib",   "meta_set", "reject",
                                      "dynset"};
static_assert(std::size(kExprNames) == std::variant_size_v<Expr>);

json ExprJson(const Expr& e) {
  Writer w;
  std::visit([&](auto x) { Fields(w, x); }, e);
  return json{{kExprNames[e.index()], std::move(w.j)}};
}

template <size_t I = 0>
bool ReadExprAs(size_t index, const json& body, Expr* out, std::string* err) {
  if constexpr (I < std::variant_size_v<Expr>) {
    if (index != I) return ReadExprAs<I + 1>(index, body, out, err);
    std::variant_alternative_t<I, Expr> x{};
    Reader r{body};
    Fields(r, x);
    if (!r.error.empty()) {
      *err = std::string(kExprNames[I]) + ": " + r.error;
      return false;
    }
    *out = std::move(x);
    return true;
  } else {
    return false;
  }
}

bool ReadExpr(const json& j, Expr* out, std::string* err) {
  if (!j.is_object() || j.size() != 1 || !j.begin().value().is_object()) {
    *err = "an expression is one {\"kind\": {...}} object";
    return false;
  }
  const std::string kind = j.begin().key();
  for (size_t i = 0; i < std::size(kExprNames); ++i)
    if (kind == kExprNames[i]) return ReadExprAs(i, j.begin().value(), out, err);
  *err = "unknown expression \"" + kind + "\"";
  return false;
}

template <class V> void Fields(V& v, Hook& x) {
  v.Int("num", x.num); v.Int("priority", x.priority); v.Str("type", x.type); v.Str("device", x.device);
  v.Int("policy", x.policy);
}
template <class V> void Fields(V& v, Set& x) {
  v.Str("name", x.name); v.Int("flags", x.flags); v.Int("key_type", x.key_type); v.Int("key_len", x.key_len);
  v.Int("data_type", x.data_type); v.Int("data_len", x.data_len); v.Int("timeout_ms", x.timeout_ms);
  v.Bytes("userdata", x.userdata);
}
template <class V> void Fields(V& v, Element& x) {
  v.Bytes("key", x.key); v.Bytes("key_end", x.key_end); v.Bytes("data", x.data); v.Int("flags", x.flags);
  v.Int("timeout_ms", x.timeout_ms);
}
template <class V> void Fields(V& v, NamedCounter& x) { v.Str("name", x.name); v.Int("packets", x.packets); v.Int("bytes", x.bytes); }
template <class V> void Fields(V& v, NamedLimit& x) {
  v.Str("name", x.name); v.Int("rate", x.rate); v.Int("unit", x.unit); v.Int("burst", x.burst); v.Int("type", x.type);
  v.Bool("invert", x.invert);
}

template <class T>
json Plain(T x) {
  Writer w;
  Fields(w, x);
  return std::move(w.j);
}

json ObjectJson(const Object& o) {
  struct V {
    json operator()(const Table& t) { return {{"table", {{"name", t.name}}}}; }
    json operator()(const Chain& c) {
      json j = {{"name", c.name}};
      if (c.hook) j["hook"] = Plain(*c.hook);
      return {{"chain", std::move(j)}};
    }
    json operator()(const Rule& r) {
      json exprs = json::array();
      for (const auto& e : r.exprs) exprs.push_back(ExprJson(e));
      json j = {{"chain", r.chain}, {"exprs", std::move(exprs)}};
      if (!r.comment.empty()) j["comment"] = r.comment;
      if (r.handle) j["handle"] = r.handle;
      return {{"rule", std::move(j)}};
    }
    json operator()(const Set& s) {
      json j = Plain(s);
      json fields = json::array();
      for (uint32_t f : s.fields) fields.push_back(f);
      j["fields"] = std::move(fields);
      return {{"set", std::move(j)}};
    }
    json operator()(const Elements& e) {
      json elems = json::array();
      for (const auto& el : e.elems) {
        json j = Plain(el);
        if (el.verdict) j["verdict"] = Plain(*el.verdict);
        elems.push_back(std::move(j));
      }
      return {{"elements", {{"set", e.set}, {"elems", std::move(elems)}}}};
    }
    json operator()(const NamedCounter& c) { return {{"counter", Plain(c)}}; }
    json operator()(const NamedLimit& l) { return {{"limit", Plain(l)}}; }
  };
  return std::visit(V{}, o);
}


template <class T>
bool ReadPlain(const json& j, T* out, std::string* err) {
  if (!j.is_object()) {
    *err = "not an object";
    return false;
  }
  Reader r{j};
  Fields(r, *out);
  if (!r.error.empty()) *err = r.error;
  return r.error.empty();
}

bool ReadObject(const json& op, Object* out, std::string* err) {
  auto has = [&](const char* k) { return op.contains(k); };
  if (has("table")) {
    Table t;
    const json& j = op["table"];
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return *err = "table: no name", false;
    t.name = j["name"].get<std::string>();
    *out = t;
    return true;
  }
  if (has("chain")) {
    const json& j = op["chain"];
    Chain c;
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return *err = "chain: no name", false;
    c.name = j["name"].get<std::string>();
    if (j.contains("hook")) {
      Hook h;
      if (!ReadPlain(j["hook"], &h, err)) return *err = "chain hook: " + *err, false;
      c.hook = h;
    }
    *out = c;
    return true;
  }
  if (has("rule")) {
    const json& j = op["rule"];
    Rule r;
    if (!j.is_object() || !j.contains("exprs") || !j["exprs"].is_array()) return *err = "rule: no exprs", false;
    Reader rd{j};
    rd.Str("chain", r.chain);
    rd.Str("comment", r.comment);
    rd.Int("handle", r.handle);
    if (!rd.error.empty()) return *err = "rule: " + rd.error, false;
    for (const auto& e : j["exprs"]) {
      Expr x;
      if (!ReadExpr(e, &x, err)) return *err = "rule: " + *err, false;
      r.exprs.push_back(std::move(x));
    }
    *out = std::move(r);
    return true;
  }
  if (has("set")) {
    Set s;
    if (!ReadPlain(op["set"], &s, err)) return *err = "set: " + *err, false;
    if (op["set"].contains("fields")) {
      const json& f = op["set"]["fields"];
      if (!f.is_array()) return *err = "set: fields is not an array", false;
      for (const auto& x : f) {
        if (!x.is_number_unsigned()) return *err = "set: a field length is not unsigned", false;
        s.fields.push_back(x.get<uint32_t>());
      }
    }
    *out = std::move(s);
    return true;
  }
  if (has("elements")) {
    const json& j = op["elements"];
    Elements e;
    if (!j.is_object() || !j.contains("set") || !j["set"].is_string() || !j.contains("elems") || !j["elems"].is_array())
      return *err = "elements: no set or elems", false;
    e.set = j["set"].get<std::string>();
    for (const auto& x : j["elems"]) {
      Element el;
      if (!ReadPlain(x, &el, err)) return *err = "element: " + *err, false;
      if (x.contains("verdict")) {
        Verdict v;
        if (!ReadPlain(x["verdict"], &v, err)) return *err = "element verdict: " + *err, false;
        el.verdict = v;
      }
      e.elems.push_back(std::move(el));
    }
    *out = std::move(e);
    return true;
  }
  if (has("counter")) {
    NamedCounter c;
    if (!ReadPlain(op["counter"], &c, err)) return *err = "counter: " + *err, false;
    *out = c;
    return true;
  }
  if (has("limit")) {
    NamedLimit l;
    if (!ReadPlain(op["limit"], &l, err)) return *err = "limit: " + *err, false;
    *out = l;
    return true;
  }
  *err = "no object (table, chain, rule, set, elements, counter or limit)";
  return false;
}

Status Bad(const std::string& what) {
  return Status::Error(Reason::kMalformed, Domain::kFirewall, "nftables transaction JSON: " + what);
}

}  // namespace

std::string TransactionJson(const Transaction& tx) {
  // One op's tree at a time, appended to the text: a full table at 10,000
  // pods is tens of thousands of ops, whose whole tree would cost several
  // times the text's size at once (weftd serves this on request). Comments
  // and names are the engine's own (UTF-8); replace anything else rather
  // than fail.
  auto dump = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
  std::string out = "{\"family\":" + std::to_string(static_cast<int>(tx.family())) + ",\"ops\":[";
  bool first = true;
  for (const auto& op : tx.ops()) {
    json j = ObjectJson(op.object);
    j["verb"] = VerbName(op.verb);
    if (!first) out += ',';
    first = false;
    out += dump(j);
  }
  out += "],\"table\":" + dump(json(tx.table())) + "}\n";
  return out;
}

Result<Transaction> ParseTransactionJson(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Bad("not JSON");
  if (!doc.is_object() || !doc.contains("family") || !doc["family"].is_number_integer() || !doc.contains("table") ||
      !doc["table"].is_string() || !doc.contains("ops") || !doc["ops"].is_array())
    return Bad("not {\"family\": N, \"table\": \"...\", \"ops\": [...]}");
  const int64_t fam = doc["family"].get<int64_t>();
  Family family;
  switch (fam) {
    case static_cast<int>(Family::kIp): family = Family::kIp; break;
    case static_cast<int>(Family::kIp6): family = Family::kIp6; break;
    case static_cast<int>(Family::kInet): family = Family::kInet; break;
    case static_cast<int>(Family::kBridge): family = Family::kBridge; break;
    case static_cast<int>(Family::kNetdev): family = Family::kNetdev; break;
    default: return Bad("unknown family " + std::to_string(fam));
  }
  Transaction tx(family, doc["table"].get<std::string>());
  size_t n = 0;
  for (const auto& op : doc["ops"]) {
    const std::string where = "op " + std::to_string(n++) + ": ";
    if (!op.is_object() || !op.contains("verb") || !op["verb"].is_string()) return Bad(where + "no verb");
    const std::string verb = op["verb"].get<std::string>();
    auto v = VerbFromName(verb);
    if (!v) return Bad(where + "unknown verb \"" + verb + "\"");
    Object o;
    std::string err;
    if (!ReadObject(op, &o, &err)) return Bad(where + err);
    tx.Push(*v, std::move(o));
  }
  return tx;
}

}  // namespace weft::sys::nft
