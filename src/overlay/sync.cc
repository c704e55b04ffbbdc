#include "overlay/sync.h"

namespace weft::overlay {

Status KernelSync::ApplyPlan(const KernelState& want, const Plan& plan, SyncResult* r) {
  int errors = 0;
  Status st = plan.empty() ? Status::Ok() : dp_->Apply(plan, &errors);
  r->changes += plan.size() - static_cast<size_t>(errors);
  r->errors += errors;
  if (st.ok() && errors == 0) {
    applied_ = want;
  } else {
    // Some steps failed: what the kernel holds is unknown again.
    applied_.reset();
    if (st.ok()) st = Status::Error(Reason::kFailed, Domain::kKernel,
                                    std::to_string(errors) + " kernel changes failed");
  }
  return st;
}

SyncResult KernelSync::Sync(const KernelState& want, bool full) {
  SyncResult r;
  if (!full && applied_) {
    r.plan = Diff(want, *applied_);
    r.status = ApplyPlan(want, r.plan, &r);
    if (r.status.ok()) return r;
    r.fell_back = true;
  }
  r.read_kernel = true;
  auto have = dp_->Read();
  if (!have.ok()) {
    applied_.reset();
    r.plan = Plan();
    r.status = have.status().WithPrefix("read the kernel's routes and neighbours");
    return r;
  }
  r.plan = Diff(want, *have);
  r.status = ApplyPlan(want, r.plan, &r);
  return r;
}

}  // namespace weft::overlay
