#pragma once
// `weftctl policy explain SRC DST [PORT[/PROTO]]` (docs/networkpolicy.md):
// asks weftd over its metrics address (GET /netpol/explain), so the answer
// is weftd's current model, and renders it. The rendering is pure and
// unit-tested; the command is a subcommand of `weftctl policy`.

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/ctl.h"

namespace CLI {
class App;
}

namespace weft::doctor {

// Exit codes of `weftctl policy explain` (docs/weftctl.md).
inline constexpr int kExplainAllowed = 0;
inline constexpr int kExplainDenied = 1;
inline constexpr int kExplainBadInput = 2;     // malformed SRC, DST, PORT, --family
inline constexpr int kExplainUnknownPod = 3;   // a pod weftd does not know, or without an address of the family
inline constexpr int kExplainNoWeftd = 4;      // weftd unreachable, not enforcing policy, not ready, or a bad answer

// "x/a" -> "x%2Fa": a query parameter's value.
std::string PercentEncode(const std::string& s);

// GET /netpol/explain's JSON in words (the text `explain` prints).
std::string RenderExplanation(const nlohmann::json& e);

// The `explain` subcommand of `policy`.
class PolicyExplainCommand {
 public:
  void Register(CLI::App& policy);
  bool parsed() const;
  int Run(runtime::ctl::Context& ctx);

 private:
  CLI::App* sub_ = nullptr;
  std::string src_, dst_, port_, family_;
  std::string addr_;
  std::string token_file_;
};

}  // namespace weft::doctor
