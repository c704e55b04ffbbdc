#pragma once
// ADD's IPAM over weft's database (AddIpam, add.h): the built-in allocator,
// or a delegated IPAM plugin whose addresses weft records; the hostPort
// claims; the "ready" mark; and the rollback, which is the attachment's
// ordered teardown (teardown.h).
//
// Thread-safety: one per ADD, on one thread (it holds the Store).

#include <optional>
#include <string>
#include <vector>

#include "ipam/sqlite.h"
#include "ipam/store.h"
#include "plugin/add.h"
#include "plugin/config.h"
#include "plugin/ipam_delegate.h"
#include "sys/netlink.h"

namespace weft::plugin {

class StoreIpam : public AddIpam {
 public:
  // `delegated`: the IPAM plugin (nullptr for the built-in IPAM), exec'd
  // with `call`. `store`, `cfg` and `delegated` outlive this object.
  StoreIpam(ipam::Store& store, const Config& cfg, const DelegatedIpam* delegated, DelegateCall call)
      : store_(store), cfg_(cfg), delegated_(delegated), call_(std::move(call)) {}

  Result<Allocation> Allocate(const ipam::PodRecord& want) override;
  // Also starts copying a long WAL into the database in the background
  // while the kernel work runs (see kAddCheckpointFrames).
  Status ClaimPorts(const ipam::PodRecord& rec, const std::vector<ipam::PortMapping>& maps) override;
  // Waits for that copy first, so this commit restarts the WAL.
  Status MarkReady(const ipam::PodRecord& rec) override;

  // ADD's rollback (AddSteps::teardown): waits for the WAL copy, then runs
  // the teardown of whatever the row of `req`'s attachment records now.
  // Errors are dropped: a teardown left half-done is finished by the next
  // DEL or GC.
  // REQUIRES: `host` is a socket in the node's netns.
  void Rollback(sys::Netlink& host, const AddRequest& req, bool delete_link);

 private:
  Result<Allocation> AllocateBuiltin(const ipam::PodRecord& want);
  Result<Allocation> AllocateDelegated(ipam::PodRecord rec);

  ipam::Store& store_;
  const Config& cfg_;
  const DelegatedIpam* delegated_;
  DelegateCall call_;
  std::optional<ipam::BackgroundCheckpoint> checkpoint_;
};

// WAL frames (one ADD writes about a dozen) past which ADD copies the WAL
// into the database in the background; DEL always does (see Teardown).
inline constexpr int kAddCheckpointFrames = 64;

}  // namespace weft::plugin
