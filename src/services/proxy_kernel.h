#pragma once
// The Service proxy's kernel side behind a seam, as the NetworkPolicy
// controller's NetpolKernel (policy/netpol_controller.h): what a change
// asks of the kernel (one nftables transaction, then its conntrack
// cleanup), and the periodic check that compares the kernel's table with
// the model's and repairs only a difference. The real implementation is
// weftd's (proxy_controller.h, NewProxyKernel); the fake here lets the
// logic above it be tested without root.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "services/proxy_model.h"
#include "sys/nft_fake.h"
#include "sys/nft_types.h"

namespace weft::services {

class ProxyKernel {
 public:
  virtual ~ProxyKernel() = default;
  // One transaction of table inet weft-services, all or nothing.
  virtual Status Apply(const nft::Transaction& tx) = 0;
  // The table as the kernel holds it (NotFound: none).
  virtual Result<nft::TableState> Dump() = 0;
  // Deletes the conntrack entries each flush describes.
  virtual Status DeleteConntrack(const std::vector<ConntrackFlush>& flushes) = 0;
  // Whether nftables notifications with this netlink port id came from one
  // of this kernel's recent Apply batches (as NetpolKernel::SentBy): weftd's
  // own deltas delete chains and elements, which call for no check.
  // Thread-safe.
  virtual bool SentBy(uint32_t /*portid*/) const { return false; }
};

// `c` into the kernel: its transaction, then, only once the kernel took
// it, its conntrack cleanup (entries deleted while the old rules still
// stand would be made again by them). An error names which half failed;
// after a failed transaction the caller applies Model::Full() (Change's
// contract) and keeps c.conntrack to delete once the repair is in.
Status ApplyChange(ProxyKernel& kernel, const Change& c);

// The periodic check: the kernel's table digested against the model's. On
// a difference (or no table) Full() is applied; `diff` says what differed,
// for the log line and the repair counter.
struct CheckResult {
  bool repaired = false;
  std::string diff;
};
Result<CheckResult> CheckAndRepair(ProxyKernel& kernel, const Model& model);

// In memory: the layer's fake and the conntrack deletions asked of it.
class FakeProxyKernel : public ProxyKernel {
 public:
  Status Apply(const nft::Transaction& tx) override;
  Result<nft::TableState> Dump() override;
  Status DeleteConntrack(const std::vector<ConntrackFlush>& flushes) override;

  nft::Fake& nft() { return nft_; }
  const std::vector<ConntrackFlush>& deleted() const { return deleted_; }
  // The next `n` Apply calls fail (EIO) without touching the table.
  void FailApplies(int n) { fail_applies_ = n; }

 private:
  nft::Fake nft_;
  std::vector<ConntrackFlush> deleted_;
  int fail_applies_ = 0;
};

}  // namespace weft::services
