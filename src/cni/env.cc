#include "cni/env.h"

#include <algorithm>

#include "base/strings.h"

namespace weft::cni {

const char* CommandName(Command c) {
  switch (c) {
    case Command::kAdd: return "ADD";
    case Command::kDel: return "DEL";
    case Command::kCheck: return "CHECK";
    case Command::kStatus: return "STATUS";
    case Command::kVersion: return "VERSION";
    case Command::kGc: return "GC";
  }
  return "?";
}

Result<CniArgs> ParseCniArgs(const std::string& raw, const std::vector<std::string>& known) {
  CniArgs out;
  if (raw.empty()) return out;
  for (std::string_view pair : Split(raw, ';')) {
    if (pair.empty()) continue;  // tolerate "A=1;" as runtimes emit it
    auto eq = pair.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                           "CNI_ARGS: invalid pair \"" + std::string(pair) + "\"",
                           "expected KEY=VALUE separated by ';'");
    std::string k(pair.substr(0, eq));
    std::string v(pair.substr(eq + 1));
    if (k == "IgnoreUnknown") {
      std::string lv = v;
      std::transform(lv.begin(), lv.end(), lv.begin(), ::tolower);
      if (lv != "1" && lv != "true" && lv != "0" && lv != "false")
        return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                             "CNI_ARGS: IgnoreUnknown must be 1, 0, true or false");
      out.ignore_unknown = (lv == "1" || lv == "true");
      continue;
    }
    out.values[k] = v;
  }
  if (!out.ignore_unknown) {
    for (const auto& [k, v] : out.values) {
      if (std::find(known.begin(), known.end(), k) == known.end())
        return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment, "CNI_ARGS: unknown key \"" + k + "\"",
                             "add IgnoreUnknown=1 to CNI_ARGS to ignore keys this plugin does not use");
    }
  }
  return out;
}

namespace {

// The variable `name`, "" when unset. A value that is not UTF-8 is refused
// here, before it can reach a message, a log line or a result: JSON cannot
// carry it (and a path or a name with such bytes is no runtime's).
Result<std::string> Var(const EnvLookup& lookup, const char* name) {
  const char* v = lookup(name);
  if (!v) return std::string();
  std::string s(v);
  size_t bad = Utf8ErrorOffset(s);
  if (bad != std::string::npos)
    return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                         std::string(name) + " is not valid UTF-8 (byte " + std::to_string(bad) + " of " +
                             std::to_string(s.size()) + ")");
  return s;
}

Result<Command> ParseCommand(const EnvLookup& lookup) {
  WEFT_ASSIGN_OR_RETURN(std::string c, Var(lookup, "CNI_COMMAND"));
  if (c.empty()) return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment, "CNI_COMMAND is not set");
  if (c == "ADD") return Command::kAdd;
  if (c == "DEL") return Command::kDel;
  if (c == "CHECK") return Command::kCheck;
  if (c == "STATUS") return Command::kStatus;
  if (c == "VERSION") return Command::kVersion;
  if (c == "GC") return Command::kGc;
  return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment, "unknown CNI_COMMAND \"" + c + "\"",
                       "expected ADD, DEL, CHECK, STATUS, VERSION or GC");
}

}  // namespace

Result<Env> ParseEnv(const EnvLookup& lookup) {
  WEFT_ASSIGN_OR_RETURN(Command cmd, ParseCommand(lookup));
  Env env;
  env.command = cmd;
  if (cmd == Command::kVersion) return env;

  WEFT_ASSIGN_OR_RETURN(env.container_id, Var(lookup, "CNI_CONTAINERID"));
  WEFT_ASSIGN_OR_RETURN(env.netns, Var(lookup, "CNI_NETNS"));
  WEFT_ASSIGN_OR_RETURN(env.ifname, Var(lookup, "CNI_IFNAME"));
  WEFT_ASSIGN_OR_RETURN(env.args_raw, Var(lookup, "CNI_ARGS"));
  WEFT_ASSIGN_OR_RETURN(std::string path, Var(lookup, "CNI_PATH"));
  for (auto d : Split(path, ':'))
    if (!d.empty()) env.path.emplace_back(d);

  bool attach = cmd == Command::kAdd || cmd == Command::kDel || cmd == Command::kCheck;
  if (attach) {
    if (env.container_id.empty())
      return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment, "CNI_CONTAINERID is not set");
    if (!IsValidCniName(env.container_id))
      return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                           "CNI_CONTAINERID \"" + env.container_id + "\" is invalid",
                           "it must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$");
    if (env.ifname.empty()) return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                                                 "CNI_IFNAME is not set");
    std::string why = InterfaceNameProblem(env.ifname);
    if (!why.empty())
      return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment, "CNI_IFNAME \"" + env.ifname + "\" " + why);
    if (path.empty()) return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment, "CNI_PATH is not set");
  }
  if ((cmd == Command::kAdd || cmd == Command::kCheck) && env.netns.empty())
    return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment, "CNI_NETNS is not set");
  if (!env.netns.empty() && env.netns[0] != '/')
    return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment,
                         "CNI_NETNS \"" + env.netns + "\" is not an absolute path");
  return env;
}

}  // namespace weft::cni
