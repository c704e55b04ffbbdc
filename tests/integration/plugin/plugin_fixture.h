#pragma once
// Shared fixture for the plugin's netns suites: a node netns, pods as their
// own netns, a private dataDir, and helpers to run verbs and to count what
// weft left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>

#include "ipam/store.h"
#include "testutil/netns_fixture.h"

namespace weft::testing {

using nlohmann::json;

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = std::make_unique<TestNode>("node");
    data_dir_ = TempDir("data");
  }
  void TearDown() override {
    pods_.clear();
    node_.reset();
    RemoveTree(data_dir_);
  }

  json Conf(const std::string& version = "1.1.0", json extra = json::object()) {
    json c = {{"cniVersion", version}, {"name", "weftnet"}, {"type", "weft"},    {"mode", "routed"},
              {"mtu", 1450},           {"dataDir", data_dir_}, {"ranges", {"10.244.2.0/24"}}};
    for (auto& [k, v] : extra.items()) c[k] = v;
    return c;
  }
  json BridgeConf(const std::string& version = "1.1.0", json extra = json::object()) {
    json c = Conf(version, {{"mode", "bridge"}, {"bridge", "wbr0"}});
    for (auto& [k, v] : extra.items()) c[k] = v;
    return c;
  }
  const TestNetns& Pod(const std::string& name) {
    auto it = pods_.find(name);
    if (it == pods_.end()) it = pods_.emplace(name, std::make_unique<TestNetns>(name)).first;
    return *it->second;
  }
  PluginRun Cni(const std::string& cmd, const std::string& cid, const std::string& netns, const json& conf,
                const std::string& ifname = "eth0", std::map<std::string, std::string> extra_env = {}) {
    auto env = CniEnv(cmd, cid, netns, ifname);
    for (auto& [k, v] : extra_env) env[k] = v;
    return RunPlugin(BinaryPath("weft"), *node_, env, conf.dump());
  }
  PluginRun Add(const std::string& cid, const json& conf) { return Cni("ADD", cid, Pod(cid).path(), conf); }
  PluginRun Del(const std::string& cid, const json& conf) { return Cni("DEL", cid, Pod(cid).path(), conf); }

  std::vector<std::string> HostVeths() {
    std::vector<std::string> out;
    for (auto& l : node_->IpJson({"link", "show"}))
      if (l.value("ifname", "").rfind("wft", 0) == 0) out.push_back(l["ifname"]);
    return out;
  }
  size_t DbRows() {
    auto s = ipam::Store::Open(data_dir_);
    if (!s.ok()) return 0;
    auto rows = s->ListPods("");
    return rows.ok() ? rows->size() : 0;
  }
  size_t DbPortMappings() {
    auto s = ipam::Store::Open(data_dir_);
    if (!s.ok()) return 0;
    auto m = s->ListPortMappings();
    return m.ok() ? m->size() : 0;
  }
  void ExpectNoPodsLeft() {
    EXPECT_TRUE(HostVeths().empty()) << json(HostVeths()).dump();
    EXPECT_EQ(DbRows(), 0u);
  }
  // The first address of `family` ("inet"/"inet6") in an ADD result.
  static std::string PodIp(const PluginRun& r, bool v6 = false) {
    json j = r.Json();
    if (!j.contains("ips")) {
      std::string a = j[v6 ? "ip6" : "ip4"]["ip"];
      return a.substr(0, a.find('/'));
    }
    for (auto& ip : j["ips"]) {
      std::string a = ip["address"];
      if ((a.find(':') != std::string::npos) == v6) return a.substr(0, a.find('/'));
    }
    return "";
  }
  std::string NodeOut(const std::vector<std::string>& argv) {
    std::string out;
    node_->Exec(argv, &out);
    return out;
  }

  std::unique_ptr<TestNode> node_;
  std::map<std::string, std::unique_ptr<TestNetns>> pods_;
  std::string data_dir_;
};

// A TCP server in a netns answering every connection with "pong"
// (busybox nc), killed with its process group when the object goes away.
class PongServer {
 public:
  PongServer(const TestNetns& ns, int port) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      std::string p = std::to_string(port);
      ::execlp("timeout", "timeout", "120", "ip", "netns", "exec", ns.name().c_str(), "busybox", "nc", "-ll", "-p",
               p.c_str(), "-e", "/bin/echo", "pong", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::usleep(300 * 1000);  // let it bind
  }
  ~PongServer() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  PongServer(const PongServer&) = delete;
  PongServer& operator=(const PongServer&) = delete;

 private:
  pid_t pid_ = -1;
};

// True when a TCP connection from `from` to ip:port answers "pong".
inline bool Pong(const TestNetns& from, const std::string& ip, int port) {
  std::string out;
  from.Exec({"busybox", "nc", "-w", "2", ip, std::to_string(port)}, &out);
  return out.find("pong") != std::string::npos;
}

}  // namespace weft::testing
