#include "plugin/datapath.h"

#include <sys/socket.h>

#include "base/strings.h"
#include "sys/files.h"

namespace weft::plugin {

Status VethDatapath::CreateLinks(uint32_t host_group) {
  sys::Netlink& host = ctx_.host;
  // Bridge mode: the pod's MAC is fixed at creation, as the source guard
  // binds its port to it (a pod that changes it is cut off).
  const std::string mac = cfg_.mode == Mode::kBridge ? PodMac(ctx_.host_ifname) : "";
  Status st = host.CreateVeth(ctx_.host_ifname, ctx_.ifname, ctx_.pod_ns.fd(), ctx_.mtu, host_group, mac);
  if (!st.ok() && sys::IsExists(st)) {
    // Say which end's name is taken.
    auto h = host.GetLink(ctx_.host_ifname);
    if (h.ok() && h->has_value()) {
      st = Status::Error(Reason::kAlreadyExists, Domain::kKernel,
                         "host interface " + ctx_.host_ifname + " already exists",
                         "a link with this container's deterministic name is present; run DEL for the "
                         "container or `weftctl doctor --fix`");
    } else {
      auto p = ctx_.pod.GetLink(ctx_.ifname);
      if (p.ok() && p->has_value())
        st = Status::Error(Reason::kAlreadyExists, Domain::kKernel,
                           "interface " + ctx_.ifname + " already exists in netns " + ctx_.pod_ns.path());
    }
  }
  return st.Prefix("create veth");
}

Result<sys::LinkInfo> VethDatapath::ReadHostLink() {
  auto link = ctx_.host.GetLink(ctx_.host_ifname);
  if (!link.ok()) return link.status().WithPrefix("read " + ctx_.host_ifname);
  if (!link->has_value()) return Status::Error(Reason::kFailed, Domain::kKernel,
                                               "host interface " + ctx_.host_ifname + " vanished");
  return **link;
}

Result<sys::LinkInfo> VethDatapath::RequireLinkUp(sys::Netlink& nl, const std::string& name,
                                                  const std::string& what, const std::string& where) {
  WEFT_ASSIGN_OR_RETURN(auto link, nl.GetLink(name));
  if (!link) return Status::Error(Reason::kMismatch, Domain::kNone, what + " is missing" + where);
  if (!link->up) return Status::Error(Reason::kMismatch, Domain::kNone, what + " is down" + where);
  return *link;
}

Status VethDatapath::RequirePodAddress(const sys::LinkInfo& pod_link, const IpPrefix& want, bool exact_prefix) {
  WEFT_ASSIGN_OR_RETURN(auto addrs, ctx_.pod.ListAddresses(want.is_v4() ? AF_INET : AF_INET6));
  for (const auto& ad : addrs)
    if (ad.index == pod_link.index && (exact_prefix ? ad.prefix == want : ad.prefix.addr() == want.addr()))
      return Status::Ok();
  return Status::Error(Reason::kMismatch, Domain::kNone,
                       "pod address " + (exact_prefix ? want.ToString() : want.addr().ToString()) +
                                               " is not on " + ctx_.ifname);
}

cni::Interface ResultInterface(const sys::LinkInfo& link, const std::string& sandbox) {
  return {link.name, link.mac, link.mtu, sandbox, "", ""};
}

int DeriveMtu(sys::Netlink& host) {
  // /proc/net/route walks the FIB trie in order, so a default route is on
  // the first lines: this stays cheap however many pod routes the node has.
  // The kernel formats as many 128-byte lines as the read asks for, so ask
  // for the header and three routes first (the default route is the first
  // one), and for 64 lines only when it is not among them.
  for (size_t want : {size_t{512}, size_t{8192}}) {
    auto f = sys::ReadFile("/proc/net/route", want);
    if (!f.ok()) break;
    auto lines = Split(*f, '\n');
    for (size_t i = 1; i < lines.size() && i < 64; ++i) {
      auto cols = Split(lines[i], '\t');
      if (cols.size() < 8) continue;
      if (Trim(cols[1]) == "00000000" && Trim(cols[7]) == "00000000") {
        auto l = host.GetLink(std::string(Trim(cols[0])));
        if (l.ok() && l->has_value() && (*l)->mtu > 0) return (*l)->mtu;
      }
    }
    if (f->size() < want) break;  // the whole table was read
  }
  return 1500;
}

}  // namespace weft::plugin
