// A stand-in CNI plugin for the runtime's unit tests. It appends one JSON
// line per call to $FAKE_LOG ({"argv0","env":{CNI_*},"stdin":...}) and
// behaves as the "fake" object of its config says:
//   "fake": {"fail": {"DEL": 7}, "crash": ["ADD"], "hang": ["CHECK"],
//            "stderrOnly": ["ADD"], "garbage": ["ADD"]}
// ADD prints prevResult with one more interface named after the plugin's
// type, or a fresh result when there is no prevResult. VERSION supports the
// comma-separated $FAKE_VERSIONS (default 0.1.0..1.1.0).

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

using nlohmann::json;

namespace {

bool Listed(const json& fake, const char* key, const std::string& cmd) {
  if (!fake.contains(key)) return false;
  for (const auto& c : fake[key])
    if (c == cmd) return true;
  return false;
}

json FreshResult(const std::string& version, const std::string& type) {
  if (version == "0.1.0" || version == "0.2.0")
    return {{"cniVersion", version}, {"ip4", {{"ip", "10.1.2.3/24"}, {"gateway", "10.1.2.1"}}}};
  json ip = {{"address", "10.1.2.3/24"}, {"gateway", "10.1.2.1"}, {"interface", 0}};
  if (version.rfind("0.3", 0) == 0) ip["version"] = "4";
  return {{"cniVersion", version},
          {"interfaces", json::array({{{"name", type}, {"sandbox", "/fake/netns"}}})},
          {"ips", json::array({ip})}};
}

}  // namespace

int main(int, char** argv) {
  std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const char* cmd_c = std::getenv("CNI_COMMAND");
  std::string cmd = cmd_c ? cmd_c : "";
  json conf = json::object();
  try {
    if (!in.empty()) conf = json::parse(in);
  } catch (...) {
    std::cout << R"({"code":6,"msg":"fake: bad stdin"})";
    return 1;
  }
  if (const char* log = std::getenv("FAKE_LOG")) {
    json env = json::object();
    for (const char* k : {"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"})
      if (const char* v = std::getenv(k)) env[k] = v;
    if (const char* v = std::getenv("FAKE_INHERITED")) env["FAKE_INHERITED"] = v;
    std::ofstream(log, std::ios::app) << json{{"argv0", argv[0]}, {"env", env}, {"stdin", conf}}.dump() << "\n";
  }
  if (cmd == "VERSION") {
    std::string vs = std::getenv("FAKE_VERSIONS") ? std::getenv("FAKE_VERSIONS")
                                                  : "0.1.0,0.2.0,0.3.0,0.3.1,0.4.0,1.0.0,1.1.0";
    json arr = json::array();
    std::stringstream ss(vs);
    for (std::string v; std::getline(ss, v, ',');) arr.push_back(v);
    std::cout << json{{"cniVersion", "1.0.0"}, {"supportedVersions", arr}}.dump();
    return 0;
  }
  json fake = conf.value("fake", json::object());
  std::string type = conf.value("type", "fake");
  std::string version = conf.value("cniVersion", "0.1.0");
  if (Listed(fake, "crash", cmd)) {
    // A real death by signal 11 in every build: sanitizers install their own
    // SIGSEGV handler, which would turn this into a report and an abort.
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  }
  if (Listed(fake, "hang", cmd)) ::pause();
  if (Listed(fake, "stderrOnly", cmd)) {
    std::cerr << "fake: something broke on " << cmd << "\n";
    return 2;
  }
  if (Listed(fake, "garbage", cmd)) {
    std::cout << "this is not json";
    return cmd == "ADD" ? 0 : 1;
  }
  if (fake.contains("fail") && fake["fail"].contains(cmd)) {
    std::cout << json{{"cniVersion", version}, {"code", fake["fail"][cmd]}, {"msg", "fake " + type + " refuses " + cmd},
                      {"details", "as configured"}}
                     .dump();
    return 1;
  }
  if (cmd == "ADD") {
    json r = conf.contains("prevResult") ? conf["prevResult"] : FreshResult(version, type);
    if (r.contains("interfaces")) r["interfaces"].push_back({{"name", type}});
    if (fake.value("omitVersion", false)) r.erase("cniVersion");
    std::cout << r.dump();
  }
  return 0;
}
