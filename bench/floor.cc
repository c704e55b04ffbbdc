#include "bench/floor.h"

#include <linux/rtnetlink.h>

#include "sys/netns.h"

namespace weft::bench {

Status FloorAdd(sys::Netlink& host, const std::string& pod_netns_path, const std::string& host_ifname,
                const IpAddress& pod_ip, int mtu) {
  WEFT_ASSIGN_OR_RETURN(auto pod_ns, sys::Netns::Open(pod_netns_path));
  WEFT_RETURN_IF_ERROR(host.CreateVeth(host_ifname, "eth0", pod_ns.fd(), mtu));
  WEFT_ASSIGN_OR_RETURN(auto pod, sys::Netlink::OpenIn(pod_ns));
  WEFT_ASSIGN_OR_RETURN(auto eth0, pod.GetLink("eth0"));
  if (!eth0) return Status::Error(Reason::kFailed, Domain::kKernel, "eth0 missing in " + pod_netns_path);
  const int idx = eth0->index;
  const IpAddress gw = *IpAddress::Parse(kFloorGateway);
  WEFT_RETURN_IF_ERROR(pod.SetUp(idx));  // before routes: ENETDOWN otherwise
  WEFT_RETURN_IF_ERROR(pod.AddAddress(idx, IpPrefix(pod_ip, 32)));
  WEFT_RETURN_IF_ERROR(pod.AddRoute({IpPrefix(gw, 32), std::nullopt, idx, RT_SCOPE_LINK}));
  WEFT_RETURN_IF_ERROR(pod.AddRoute({*IpPrefix::Parse("0.0.0.0/0"), gw, idx, RT_SCOPE_UNIVERSE}));
  WEFT_ASSIGN_OR_RETURN(auto h, host.GetLink(host_ifname));
  if (!h) return Status::Error(Reason::kFailed, Domain::kKernel, host_ifname + " missing");
  WEFT_RETURN_IF_ERROR(host.SetUp(h->index, /*proxy_arp=*/true));
  return host.AddRoute({IpPrefix(pod_ip, 32), std::nullopt, h->index, RT_SCOPE_LINK});
}

}  // namespace weft::bench
