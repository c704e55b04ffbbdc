#pragma once
// Network namespaces and scratch directories the benchmark creates. Every
// name starts with the run's prefix ("wb<pid>"), so CleanupPrefix can remove
// all of it after a crash or Ctrl-C. Nothing here touches the root netns.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "sys/netlink.h"
#include "sys/netns.h"

namespace weft::bench {

// Set from the SIGINT/SIGTERM handler; long loops poll it (the one piece of
// global state: a signal handler can reach nothing else).
std::atomic<bool>& InterruptFlag();
// Throws Interrupted when the flag is set.
struct Interrupted {};
void CheckInterrupt();

// What every weft-bench-* driver does first: SIGINT and SIGTERM set
// InterruptFlag (the driver cleans up and exits 130), SIGPIPE is ignored,
// the output directory `out` is made, and each of `binaries` (paths under
// `build_dir`) must be built: the error names the first that is not.
Status StartBenchDriver(const std::string& out, const std::string& build_dir,
                        const std::vector<std::string>& binaries);
// A driver's main(): runs `body`; an exception it lets out is printed as
// "<tool>: <what>" and exits 1.
int RunDriverMain(const char* tool, int argc, char** argv, int (*body)(int, char**));

// A non-blocking netlink socket of `protocol` (NETLINK_ROUTE,
// NETLINK_NETFILTER) opened in the netns at `netns_path` and bound to the
// multicast `groups` (a bit mask; 0 for none), with a receive buffer of
// `rcvbuf` bytes (forced past net.core.rmem_max when allowed) so that a
// burst of notifications is not lost. `what` names it in errors.
Result<UniqueFd> OpenNetlinkListener(const std::string& netns_path, int protocol, uint32_t groups, int rcvbuf,
                                     const std::string& what);

// Creates /run/netns/<name> in-process (unshare on a helper thread and a
// bind mount), about 10x cheaper than exec'ing `ip netns add`, which matters
// with a thousand pods. Brings lo up when `lo_up`.
Status CreateNetns(const std::string& name, bool lo_up = false);
// Unmounts and unlinks /run/netns/<name>; the kernel tears the namespace
// down asynchronously once nothing holds it.
void DeleteNetns(const std::string& name);
std::string NetnsPath(const std::string& name);

// Removes every /run/netns/<prefix>* (first killing processes still inside
// them: only ever ones this benchmark started, e.g. an iperf3 server) and
// every /tmp/<prefix>* directory.
void CleanupPrefix(const std::string& prefix);

// mkdtemp under /tmp with the prefix.
std::string MakeTempDir(const std::string& prefix, const std::string& tag);
void RemoveTree(const std::string& path);

// A node: netns with lo up and an uplink veth up0 (192.0.2.<octet>/24,
// default via 192.0.2.254) so plugins find a default-route interface, as on a
// real node. up1, the other end, stays in the node.
Status CreateNode(const std::string& name, int octet);

// Lets the kernel finish deferred netns/veth destruction before the next
// measurement, so one configuration's teardown does not bill the next.
// Uses a scratch netns <prefix>-settle (removed by CleanupPrefix).
void Settle(const std::string& prefix, int pods_removed);

// Plain helpers on top of sys::Netlink for topologies.
Result<int> LinkIndex(sys::Netlink& nl, const std::string& name);
Status AddrUp(sys::Netlink& nl, const std::string& ifname, const std::string& cidr);

}  // namespace weft::bench
