#include "services/proxy_kernel.h"

#include <cerrno>

namespace weft::services {

Status ApplyChange(ProxyKernel& kernel, const Change& c) {
  if (!c.tx.empty())
    if (Status st = kernel.Apply(c.tx); !st.ok()) return st.WithPrefix("services: apply the change's transaction");
  if (!c.conntrack.empty())
    if (Status st = kernel.DeleteConntrack(c.conntrack); !st.ok())
      return st.WithPrefix("services: delete the change's conntrack entries");
  return Status::Ok();
}

Result<CheckResult> CheckAndRepair(ProxyKernel& kernel, const Model& model) {
  CheckResult out;
  const TableDigest want = model.Digest();
  auto have = kernel.Dump();
  if (!have.ok() && !have.status().IsNotFound()) return have.status().WithPrefix("services: read the table");
  if (have.ok()) {
    out.diff = DigestOf(*have).Diff(want);
    if (out.diff.empty()) return out;
  } else {
    out.diff = "table inet weft-services is missing\n";
  }
  if (Status st = kernel.Apply(model.Full()); !st.ok()) return st.WithPrefix("services: repair the table");
  out.repaired = true;
  return out;
}

Status FakeProxyKernel::Apply(const nft::Transaction& tx) {
  if (fail_applies_ > 0) {
    --fail_applies_;
    return nft::OpError("injected failure", EIO);
  }
  return nft_.Apply(tx);
}

Result<nft::TableState> FakeProxyKernel::Dump() { return nft_.Dump(nft::Family::kInet, kTable); }

Status FakeProxyKernel::DeleteConntrack(const std::vector<ConntrackFlush>& flushes) {
  deleted_.insert(deleted_.end(), flushes.begin(), flushes.end());
  return Status::Ok();
}

}  // namespace weft::services
