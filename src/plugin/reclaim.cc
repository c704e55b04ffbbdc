#include "plugin/reclaim.h"

#include "ipam/store.h"
#include "plugin/hostports.h"
#include "plugin/teardown.h"
#include "sys/files.h"
#include "sys/netlink.h"

namespace weft::plugin {

Result<ReclaimReport> ReclaimVanished(const ReclaimOptions& opts) {
  ReclaimReport report;
  if (!sys::PathExists(opts.data_dir + "/ipam.db")) return report;
  WEFT_ASSIGN_OR_RETURN(ipam::Store store, ipam::Store::Open(opts.data_dir));
  WEFT_ASSIGN_OR_RETURN(auto rows, store.ListPods(opts.network));
  WEFT_ASSIGN_OR_RETURN(sys::Netlink host, sys::Netlink::Open());
  Status first_error;
  for (const auto& r : rows) {
    ++report.examined;
    if (!AttachmentVanished(host, r)) continue;
    const std::string id = r.container_id + "/" + r.ifname;
    DelegateCall none{r.container_id, "", r.ifname, "", {}};
    Status st = Teardown(host, store, opts.hostport_backend, opts.data_dir, /*delegated=*/nullptr, none,
                         {r.container_id, r.ifname, r, r.host_ifname});
    if (st.ok()) {
      report.reclaimed.push_back(id);
    } else {
      report.failed.push_back(id);
      if (first_error.ok()) first_error = st.WithPrefix("reclaim " + id);
    }
  }
  // weftd's resync: the full hostPort diff (ADD and DEL touch only their
  // own entries).
  if (Status hp = SyncHostPorts(opts.hostport_backend, opts.data_dir, store); !hp.ok() && first_error.ok())
    first_error = hp.WithPrefix("reclaim");
  if (!first_error.ok()) return first_error;
  return report;
}

}  // namespace weft::plugin
