#pragma once
// Reclaiming attachments that cannot exist any more, typically after a
// reboot: pod network namespaces and host veths are gone, the database in
// the dataDir is not. weftd calls ReclaimVanished once at start (before it
// reports the node ready); the plugin's GC applies the same test to the
// attachments a runtime still lists as valid.
//
// Contract:
//  - An attachment is reclaimed only when BOTH its recorded netns path no
//    longer names a network namespace AND its host veth is absent from the
//    calling thread's network namespace (AttachmentVanished). An ADD in
//    flight always has its netns, so reclaim never races one; a live pod
//    whose netns lives at another path keeps its veth, so it is never
//    reclaimed either.
//  - Reclaiming = the same ordered, idempotent teardown as DEL (teardown.h):
//    the row turns deleting, its hostPort entries of `hostport_backend`
//    leave the kernel, then the row (its addresses and mappings) is deleted.
//    Rows in every state (adding, ready, deleting) qualify. A crash during
//    reclaim is finished by the next reclaim, DEL or GC. At the end the
//    hostPort table gets the full diff against the database (as GC does).
//  - Addresses from a delegated IPAM plugin (host-local, ...) are only
//    dropped from weft's database: weftd has no plugin config to exec it
//    with. The runtime's next GC (forwarded to that plugin) frees them in
//    the plugin's own store.
//  - Idempotent and safe to run concurrently with plugin invocations (every
//    change is a short SQLite transaction; the hostPort sync takes its lock).
// REQUIRES: the calling thread is in the node's network namespace (the one
// the plugin creates host veths in), and may write `data_dir`.

#include <string>
#include <vector>

#include "base/status.h"
#include "plugin/config.h"

namespace weft::plugin {

struct ReclaimOptions {
  std::string data_dir = "/var/lib/weft";
  std::string network;  // only rows of this CNI network; "" = every network
  // The backend the network's config uses for hostPorts ("masqueradeBackend").
  FwBackend hostport_backend = FwBackend::kNftables;
};

struct ReclaimReport {
  int examined = 0;
  std::vector<std::string> reclaimed;  // "<containerID>/<ifname>"
  // Rows that qualified but whose teardown failed; the first error is
  // returned as the Status of ReclaimVanished.
  std::vector<std::string> failed;
};

// Errors: the dataDir cannot be opened (store, file), a teardown failed
// (its code, prefixed with the attachment). A missing dataDir is not an
// error: there is nothing to reclaim (and nothing is created).
Result<ReclaimReport> ReclaimVanished(const ReclaimOptions& opts);

}  // namespace weft::plugin
