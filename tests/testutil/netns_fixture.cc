#include "testutil/netns_fixture.h"

#include <fcntl.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "sys/exec.h"
#include "sys/netns.h"

namespace weft::testing {

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

const std::string& Prefix() {
  static const std::string p = "wt" + std::to_string(::getpid());
  return p;
}

std::string BinaryPath(const std::string& name) {
  return std::string(WEFT_BUILD_DIR) + "/cmd/" + name + "/" + name;
}

std::string TempDir(const std::string& tag) {
  std::string t = "/tmp/" + Prefix() + "-" + tag + "-XXXXXX";
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back(0);
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

void RemoveTree(const std::string& path) {
  if (path.rfind("/tmp/" + Prefix(), 0) != 0) return;  // only our own
  Cmd({"/bin/rm", "-rf", path});
}

void RemoveCgroupTree(const std::string& name) {
  if (name.empty() || name.find("..") != std::string::npos) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> dirs;
  for (const auto& ctrl : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    fs::path root = ctrl.path() / name;
    if (!fs::is_directory(root, ec)) continue;
    dirs.push_back(root);
    for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::recursive_directory_iterator(); ++it)
      if (it->is_directory(ec)) dirs.push_back(it->path());
  }
  for (const auto& d : dirs) {
    std::ifstream procs(d / "cgroup.procs");
    for (pid_t pid; procs >> pid;) ::kill(pid, SIGKILL);
  }
  std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) {
    return a.string().size() > b.string().size();
  });
  for (int attempt = 0; attempt < 50; ++attempt) {
    bool left = false;
    for (const auto& d : dirs)
      if (fs::exists(d, ec) && ::rmdir(d.c_str()) != 0) left = true;
    if (!left) return;
    ::usleep(100 * 1000);  // killed processes take a moment to leave
  }
}

int Cmd(const std::vector<std::string>& argv, std::string* out, std::string* err, const std::string& input) {
  sys::ExecRequest req;
  req.path = argv[0];
  if (req.path.find('/') == std::string::npos) {
    auto p = sys::FindInPath(req.path, {"/usr/sbin", "/usr/bin", "/sbin", "/bin"});
    if (!p.ok()) return 127;
    req.path = *p;
  }
  req.argv = argv;
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  req.stdin_data = input;
  req.timeout = std::chrono::seconds(120);
  auto r = sys::Exec(req);
  if (!r.ok()) return 127;
  if (out) *out = r->out;
  if (err) *err = r->err;
  return r->timed_out ? 124 : (r->term_signal ? 128 + r->term_signal : r->exit_code);
}

TestNetns::TestNetns(const std::string& suffix) : name_(Prefix() + "-" + suffix) {
  Cmd({"ip", "netns", "del", name_});  // a leftover from a crashed run of this pid
  std::string err;
  if (Cmd({"ip", "netns", "add", name_}, nullptr, &err) != 0)
    throw std::runtime_error("ip netns add " + name_ + ": " + err);
  Cmd({"ip", "-n", name_, "link", "set", "lo", "up"});
}

TestNetns::~TestNetns() { Cmd({"ip", "netns", "del", name_}); }

int TestNetns::Exec(const std::vector<std::string>& argv, std::string* out) const {
  std::vector<std::string> full = {"ip", "netns", "exec", name_};
  full.insert(full.end(), argv.begin(), argv.end());
  return Cmd(full, out);
}

nlohmann::json TestNetns::IpJson(const std::vector<std::string>& args) const {
  std::vector<std::string> full = {"ip", "-n", name_, "-j"};
  full.insert(full.end(), args.begin(), args.end());
  std::string out;
  if (Cmd(full, &out) != 0 || out.empty()) return nlohmann::json::array();
  try {
    return nlohmann::json::parse(out);
  } catch (...) {
    return nlohmann::json::array();
  }
}

bool TestNetns::HasLink(const std::string& ifname) const {
  return Cmd({"ip", "-n", name_, "link", "show", "dev", ifname}) == 0;
}

bool TestNetns::Ping(const std::string& ip, int count) const {
  std::string c = std::to_string(count);
  std::vector<std::string> argv = {"ping", "-c", c, "-W", "2", "-i", "0.2", ip};
  if (ip.find(':') != std::string::npos) argv.insert(argv.begin() + 1, "-6");
  return Exec(argv) == 0;
}

TestNode::TestNode(const std::string& suffix, int host_octet, int uplink_mtu) : TestNetns(suffix) {
  const std::string& n = name();
  std::string mtu = std::to_string(uplink_mtu);
  Cmd({"ip", "-n", n, "link", "add", "up0", "mtu", mtu, "type", "veth", "peer", "name", "up1", "mtu", mtu});
  Cmd({"ip", "-n", n, "addr", "add", "192.0.2." + std::to_string(host_octet) + "/24", "dev", "up0"});
  Cmd({"ip", "-n", n, "link", "set", "up0", "up"});
  Cmd({"ip", "-n", n, "link", "set", "up1", "up"});
  Cmd({"ip", "-n", n, "route", "add", "default", "via", "192.0.2.254", "dev", "up0"});
}

std::string HttpGet(const TestNetns& from, const std::string& url, int seconds) {
  const char* kClient =
      "import sys, urllib.request\n"
      "print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode(), end='')\n";
  std::string out;
  for (int i = 0; i < seconds * 4; ++i) {
    if (from.Exec({"/usr/bin/python3", "-c", kClient, url}, &out) == 0) return out;
    ::usleep(250 * 1000);
  }
  return "";
}

nlohmann::json PluginRun::Json() const {
  try {
    return out.empty() ? nlohmann::json::object() : nlohmann::json::parse(out);
  } catch (...) {
    return nlohmann::json::object();
  }
}

PluginRun RunPlugin(const std::string& plugin, const TestNetns& ns, const std::map<std::string, std::string>& env,
                    const std::string& stdin_data) {
  PluginRun run;
  auto netns = sys::Netns::Open(ns.path());
  if (!netns.ok()) {
    run.err = netns.status().ToString();
    return run;
  }
  sys::ExecRequest req;
  req.path = plugin;
  req.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  // The sanitized plugin (./build-san) halts and fails as the test does.
  for (const char* k : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"})
    if (const char* v = std::getenv(k)) req.env.push_back(std::string(k) + "=" + v);
  for (const auto& [k, v] : env) req.env.push_back(k + "=" + v);
  req.stdin_data = stdin_data;
  req.netns_fd = netns->fd();
  req.timeout = std::chrono::seconds(60);
  auto r = sys::Exec(req);
  if (!r.ok()) {
    run.err = r.status().ToString();
    return run;
  }
  run.exit_code = r->timed_out ? 124 : (r->term_signal ? 128 + r->term_signal : r->exit_code);
  run.out = r->out;
  run.err = r->err;
  // Every run, whatever the test expects of it: a plugin that answered with
  // the right CNI error and then leaked, or overflowed on the way, is wrong.
  if (std::string report = SanitizerReport(run.err); !report.empty())
    ADD_FAILURE() << plugin << " (" << (env.count("CNI_COMMAND") ? env.at("CNI_COMMAND") : "?")
                  << ") printed a sanitizer report: " << report;
  return run;
}

std::string SanitizerReport(const std::string& err) {
  for (const char* mark : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error: ",
                           "SUMMARY: UndefinedBehaviorSanitizer"}) {
    size_t at = err.find(mark);
    if (at == std::string::npos) continue;
    size_t begin = err.rfind('\n', at);
    begin = begin == std::string::npos ? 0 : begin + 1;
    return err.substr(begin, err.find('\n', at) - begin);
  }
  return {};
}

std::map<std::string, std::string> CniEnv(const std::string& cmd, const std::string& cid,
                                          const std::string& netns_path, const std::string& ifname) {
  std::map<std::string, std::string> e = {{"CNI_COMMAND", cmd},
                                          {"CNI_CONTAINERID", cid},
                                          {"CNI_IFNAME", ifname},
                                          {"CNI_PATH", std::string(WEFT_BUILD_DIR) + "/cmd/weft:/usr/lib/cni"}};
  if (!netns_path.empty()) e["CNI_NETNS"] = netns_path;
  return e;
}

}  // namespace weft::testing
