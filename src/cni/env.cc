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

Result<Command> ParseCommand(const char* s) {
  if (!s || !*s) return Status::Error(Reason::kInvalidArgument, Domain::kEnvironment, "CNI_COMMAND is not set");
  std::string c = s;
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
  auto get = [&](const char* k) -> std::string {
    const char* v = lookup(k);
    return v ? std::string(v) : std::string();
  };
  WEFT_ASSIGN_OR_RETURN(Command cmd, ParseCommand(lookup("CNI_COMMAND")));
  Env env;
  env.command = cmd;
  if (cmd == Command::kVersion) return env;

  env.container_id = get("CNI_CONTAINERID");
  env.netns = get("CNI_NETNS");
  env.ifname = get("CNI_IFNAME");
  env.args_raw = get("CNI_ARGS");
  std::string path = get("CNI_PATH");
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
