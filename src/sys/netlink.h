#pragma once
// rtnetlink through libnl-route-3. A Netlink object is a socket bound to the
// network namespace it was opened in; every call acts on that namespace.
// Not thread-safe: one Netlink per thread.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/ip.h"
#include "base/status.h"
#include "sys/netns.h"

struct nl_sock;

namespace weft::sys {

// The rtm_protocol of every route Weft installs, so the reconcilers and the
// doctor can tell Weft's routes from anybody else's (`ip route` shows
// "proto 201" unless /etc/iproute2/rt_protos names it).
constexpr int kRouteProtoWeft = 201;

struct LinkInfo {
  int index = 0;
  std::string name;
  std::string kind;  // "veth", "bridge", "vxlan", ... ("" if none)
  std::string mac;
  int mtu = 0;
  bool up = false;
  int master = 0;
};

struct AddrInfo {
  int index = 0;
  IpPrefix prefix;  // address with its prefix length
  int scope = 0;
};

struct RouteSpec {
  IpPrefix dst;                   // 0.0.0.0/0 for default
  std::optional<IpAddress> gw;    // none for a scope-link route
  int oif = 0;                    // output interface index
  int scope = 0;                  // RT_SCOPE_UNIVERSE (0) or RT_SCOPE_LINK (253)
  int table = 254;                // RT_TABLE_MAIN
  int protocol = 4;               // RTPROT_STATIC unless set
  bool onlink = false;
  int mtu = 0;
  int priority = 0;
  bool operator==(const RouteSpec&) const = default;
};

struct NeighSpec {
  int index = 0;
  IpAddress dst;          // IP (ARP/NDP) or the remote host IP (FDB)
  std::string mac;        // lladdr aa:bb:..
  bool fdb = false;       // AF_BRIDGE entry on a vxlan device
};

class Netlink {
 public:
  // A socket in the calling thread's namespace.
  static Result<Netlink> Open();
  // A socket in `ns`, created on a helper thread (see RunInNetns).
  static Result<Netlink> OpenIn(const Netns& ns);
  // The same, created on the calling thread (see RunInNetnsOnThisThread for
  // when that is allowed). The plugin uses this: it is single-threaded.
  static Result<Netlink> OpenInOnThisThread(const Netns& ns);

  Netlink(Netlink&&) noexcept;
  Netlink& operator=(Netlink&&) noexcept;
  ~Netlink();

  // Links.
  Result<std::optional<LinkInfo>> GetLink(const std::string& name);
  Result<std::optional<LinkInfo>> GetLink(int index);
  Result<std::vector<LinkInfo>> ListLinks();
  // Creates a veth pair in one RTM_NEWLINK: `host` here, `peer` placed into
  // the namespace `peer_ns_fd` (never brought up at creation). A non-zero
  // `host_group` is the host end's interface group (IFLA_GROUP) in that same
  // request, so the link never exists outside it; the peer stays in group 0.
  // A non-empty `peer_mac` (6 raw bytes) is the peer's MAC address from its
  // creation on (bridge mode binds a port to it, fw/source_guard.h).
  // Errors carry EEXIST when either name is taken.
  Status CreateVeth(const std::string& host, const std::string& peer, int peer_ns_fd, int mtu,
                    uint32_t host_group = 0, const std::string& peer_mac = "");
  Status CreateBridge(const std::string& name, int mtu);
  // VXLAN: VNI, UDP port, local IP, underlay device, learning off.
  Status CreateVxlan(const std::string& name, uint32_t vni, int port, const IpAddress& local,
                     int underlay_index, int mtu);
  // Brings the link up; with `proxy_arp` also enables IPv4 proxy ARP on it in
  // the same message.
  Status SetUp(int index, bool proxy_arp = false);
  Status SetMtu(int index, int mtu);
  Status SetMaster(int index, int master_index);
  // Bridge port flags in one RTM_SETLINK: hairpin mode (IFLA_BRPORT_MODE:
  // frames may leave through the port they arrived on), and `locked` (Linux
  // 5.18+): learning off, and the bridge drops every frame whose source MAC
  // has no FDB entry pointing to this port (AddBridgeFdbStatic adds one).
  // REQUIRES: the link is a bridge port.
  Status SetBridgePortFlags(int index, bool hairpin, bool locked);
  // A static entry in the bridge's FDB: `mac` (6 raw bytes) is behind port
  // `index` (`bridge fdb replace MAC dev PORT master static`).
  Status AddBridgeFdbStatic(int index, const std::string& mac);
  // Deletes by name. Returns OK when it is already gone:
  // `*existed` tells whether anything was deleted.
  Status DeleteLink(const std::string& name, bool* existed = nullptr);

  // Addresses. `nodad` skips IPv6 duplicate address detection.
  Status AddAddress(int index, const IpPrefix& addr, bool nodad = false, bool replace = false);
  Result<std::vector<AddrInfo>> ListAddresses(int family /* AF_INET, AF_INET6, 0 */);

  // Routes. `replace` makes the call idempotent (NLM_F_REPLACE).
  Status AddRoute(const RouteSpec& r, bool replace = false);
  Status DeleteRoute(const RouteSpec& r, bool* existed = nullptr);
  Result<std::vector<RouteSpec>> ListRoutes(int family, int table = 254);

  // Neighbours: ARP/NDP entries and FDB entries, always NUD_PERMANENT.
  Status AddNeigh(const NeighSpec& n);
  Status DeleteNeigh(const NeighSpec& n, bool* existed = nullptr);
  Result<std::vector<NeighSpec>> ListNeighs(int index, bool fdb);

 private:
  explicit Netlink(nl_sock* sk) : sk_(sk) {}
  nl_sock* sk_ = nullptr;
};

// Maps a libnl error (negative NLE_*) to a Status with errno semantics.
Status NlError(int nlerr, const std::string& what);
bool IsExists(const Status& s);    // EEXIST
bool IsNotFound(const Status& s);  // ENODEV / ENOENT / ESRCH

}  // namespace weft::sys
