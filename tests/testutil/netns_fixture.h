#pragma once
// Helpers for integration tests that run the real binaries in network
// namespaces they create. Rules (DEVELOPERS.md): never touch the root netns,
// name everything with a unique prefix, remove it even on failure, and send
// traffic only to addresses inside namespaces the test made.

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace weft::testing {

// CI=true: the CI job, which runs scripts/setup.sh first.
bool InCi();
// Skips the calling test (in a void function: a TEST body, SetUp, a helper
// it calls) because something scripts/setup.sh installs is missing: listed
// as skipped by scripts/test.sh, and a failure under CI=true, where setup.sh
// has run and a missing tool is a defect. `reason` streams like GTEST_SKIP's.
// A skip because the machine cannot do something (a container runtime that
// cannot start containers here) stays a plain GTEST_SKIP.
#define WEFT_SKIP_UNLESS_SET_UP(reason)                                       \
  do {                                                                        \
    if (::weft::testing::InCi()) {                                            \
      FAIL() << "CI=true, and scripts/setup.sh should have installed it: " << reason; \
    } else {                                                                  \
      GTEST_SKIP() << reason;                                                 \
    }                                                                         \
  } while (0)

// "wt<pid>": unique per test process; every netns and dir starts with it.
const std::string& Prefix();
// Where built binaries live (WEFT_BUILD_DIR/cmd/<name>/<name>).
std::string BinaryPath(const std::string& name);
// A fresh private directory under /tmp, removed by RemoveTree.
std::string TempDir(const std::string& tag);
void RemoveTree(const std::string& path);

// Kills every process left in the cgroup `name` (a path under each v1
// controller, or the unified hierarchy, e.g. "wt123-podman") and removes its
// directories, deepest first. Container runtimes in tests are given such a
// test-owned cgroup parent so nothing is left in the machine's cgroup tree.
void RemoveCgroupTree(const std::string& name);

// Runs argv (no shell) and returns its exit code; stdout/stderr captured.
int Cmd(const std::vector<std::string>& argv, std::string* out = nullptr, std::string* err = nullptr,
        const std::string& input = "");

// A named network namespace (`ip netns add`), deleted with everything in it
// when the object goes out of scope.
class TestNetns {
 public:
  explicit TestNetns(const std::string& suffix);  // name = Prefix() + "-" + suffix
  ~TestNetns();
  TestNetns(const TestNetns&) = delete;
  TestNetns& operator=(const TestNetns&) = delete;

  const std::string& name() const { return name_; }
  std::string path() const { return "/run/netns/" + name_; }
  // Runs argv inside the namespace via `ip netns exec`.
  int Exec(const std::vector<std::string>& argv, std::string* out = nullptr) const;
  // `ip -n <ns> -j <args...>` parsed as JSON ([] on failure).
  nlohmann::json IpJson(const std::vector<std::string>& args) const;
  bool HasLink(const std::string& ifname) const;
  bool Ping(const std::string& ip, int count = 1) const;

 private:
  std::string name_;
};

// A "node": a netns with lo up and an uplink veth pair (up0 192.0.2.<n>/24,
// with a default route via 192.0.2.254 on it) so it has a source address
// and a default-route interface, as a real node does.
class TestNode : public TestNetns {
 public:
  TestNode(const std::string& suffix, int host_octet = 10, int uplink_mtu = 1500);
};

// HTTP GET from inside `from` (Debian's python3; busybox wget segfaults
// here). Retries for up to `seconds` since servers start asynchronously.
// Returns the body, or "" when nothing answered.
std::string HttpGet(const TestNetns& from, const std::string& url, int seconds = 5);

struct PluginRun {
  int exit_code = -1;
  std::string out, err;
  nlohmann::json Json() const;  // stdout parsed ({} if empty/invalid)
};

// Execs `plugin` with exactly `env` (plus PATH and the test's own
// ASAN_OPTIONS/UBSAN_OPTIONS/LSAN_OPTIONS), `stdin`, inside `ns` (the node).
// Never through a shell. A plugin killed by a signal has exit_code
// 128 + signal. A sanitizer report on its stderr fails the calling test
// (ADD_FAILURE), whatever exit code the test expects.
PluginRun RunPlugin(const std::string& plugin, const TestNetns& ns, const std::map<std::string, std::string>& env,
                    const std::string& stdin_data);

// The line of `err` that starts an ASan, LSan or UBSan report, or "".
std::string SanitizerReport(const std::string& err);

// CNI env for a verb: CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS (if non-empty),
// CNI_IFNAME, CNI_PATH (the build dir and /usr/lib/cni).
std::map<std::string, std::string> CniEnv(const std::string& cmd, const std::string& cid,
                                          const std::string& netns_path, const std::string& ifname = "eth0");

}  // namespace weft::testing
