#pragma once
// The set-up the reliability suites share (crash, kill -9, reboot, bad
// input): a node netns with IPv6 duplicate address detection off (so a
// snapshot does not change under the test), a dataDir, pod namespaces made
// on first use, and the plugin run inside the node. What each suite asserts
// stays in its own file; this is only the bench they stand on.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "node_state.h"

namespace weft::testing {

class ReliabilityNode {
 protected:
  // `reap`: this process becomes the reaper of its orphaned descendants and
  // every RunPlugin waits for the tools a killed plugin left behind (nft,
  // iptables-restore) before it returns, so that the node is inspected only
  // once they are done. REQUIRES: called once, before anything else.
  void StartNode(bool reap = false) {
    reap_ = reap;
    if (reap_) BecomeSubreaper();
    node_ = std::make_unique<TestNode>("node");
    NoDad(*node_);
    data_dir_ = TempDir("data");
  }
  // Removes the pods' namespaces, the node and the dataDir.
  void StopNode() {
    pods_.clear();
    node_.reset();
    if (!data_dir_.empty()) RemoveTree(data_dir_);
  }

  // The pod namespace `name`, made on first use.
  const TestNetns& Pod(const std::string& name) {
    auto it = pods_.find(name);
    if (it == pods_.end()) it = pods_.emplace(name, std::make_unique<TestNetns>(name)).first;
    return *it->second;
  }

  // Execs the plugin in the node for `verb` on pod `cid` (no container for
  // ""), with the CNI environment plus `extra_env`; with `kill_after`,
  // SIGKILLed that long after the exec.
  WeftRun RunPlugin(const std::string& verb, const std::string& cid, const std::string& stdin_data,
                    const std::map<std::string, std::string>& extra_env = {},
                    std::optional<std::chrono::microseconds> kill_after = std::nullopt) {
    auto env = CniEnv(verb, cid, cid.empty() ? "" : Pod(cid).path());
    for (const auto& [k, v] : extra_env) env[k] = v;
    auto r = RunWeft(*node_, env, stdin_data, kill_after);
    if (reap_) ReapOrphans();
    return r;
  }

  std::unique_ptr<TestNode> node_;
  std::map<std::string, std::unique_ptr<TestNetns>> pods_;
  std::string data_dir_;

 private:
  bool reap_ = false;
};

}  // namespace weft::testing
