#pragma once
// The node's hostPort rules as the database implies them: which rules the
// recorded port mappings want (the desired state), and the four ways the
// plugin's verbs bring the kernel there through fw/hostport.h — the full
// diff (CHECK's repair, GC, reclaim, doctor --fix), ADD's own entries,
// CHECK's verification, and the backend for teardown's removal (teardown.h).
// Every function opens the backend's firewall for `data_dir`, whose lock
// (<dataDir>/firewall.lock) serialises writers across plugin processes.

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "fw/hostport.h"
#include "ipam/store.h"
#include "plugin/config.h"

namespace weft::plugin {

// hostPort rules for every mapping in the database whose attachment is not
// being deleted: a mapping without a host IP is published in each family
// the pod has an address in.
Result<std::vector<fw::HostPortRule>> DesiredHostPorts(ipam::Store& store);
// The rules of one attachment's mappings.
std::vector<fw::HostPortRule> HostPortRulesOf(const ipam::PodRecord& pod, const std::vector<ipam::PortMapping>& maps);

std::unique_ptr<fw::HostPortFirewall> HostPortsFor(FwBackend backend, const std::string& data_dir);

// Makes the kernel's hostPort ruleset for `data_dir` match the database
// (the full diff: CHECK's repair, GC, reclaim, doctor --fix).
Status SyncHostPorts(FwBackend backend, const std::string& data_dir, ipam::Store& store);
// ADD: puts `pod`'s own hostPort entries in place, touching nothing else
// (nftables; iptables rebuilds its chains).
Status AddHostPorts(FwBackend backend, const std::string& data_dir, ipam::Store& store, const ipam::PodRecord& pod);
// CHECK: an error naming what is missing when `pod`'s entries are not in
// the kernel (nftables only).
Status VerifyHostPorts(FwBackend backend, const std::string& data_dir, ipam::Store& store,
                       const ipam::PodRecord& pod);

}  // namespace weft::plugin
