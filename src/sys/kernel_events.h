#pragma once
// The kernel's change notifications weftd wakes on (issue 34): rtnetlink's
// link, address, route and netconf groups (both families) and nftables'
// NFNLGRP_NFTABLES (every committed table, chain and rule change, by
// anyone), in the network namespace the monitor was opened in. Only what a
// notification says is decoded here; what is worth a wake is the caller's.
//
// Not thread-safe: one reader.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::sys {

struct KernelEvent {
  enum class Kind {
    kLink,      // RTM_NEWLINK / RTM_DELLINK: `name`, `index`, `up`
    kAddress,   // RTM_NEWADDR / RTM_DELADDR: `index`, `family`
    kRoute,     // RTM_NEWROUTE / RTM_DELROUTE: `family`, `protocol`, `gateway`, `index` (oif)
    kNetconf,   // RTM_NEWNETCONF: `index` (-1/-2: all/default), `family`, `proxy_arp` (-1: not said)
    kNftTable,  // NFT_MSG_NEWTABLE / DELTABLE: `family`, `table`
    kNftChain,  // NFT_MSG_NEWCHAIN / DELCHAIN: `family`, `table`, `name` (the chain)
    kNftRule,   // NFT_MSG_NEWRULE / DELRULE: `family`, `table`, `name` (the chain)
  };
  Kind kind = Kind::kLink;
  bool deleted = false;
  int family = 0;  // AF_INET/AF_INET6; nftables: NFPROTO_*
  int index = 0;
  std::string name;
  std::string table;
  int protocol = 0;
  bool gateway = false;
  bool up = false;
  int proxy_arp = -1;
  // The netlink port id of the socket whose request made the change
  // (nlmsg_pid): 0 for the kernel's own. nftables notifications carry the
  // committing socket's, so a process can tell its own commits apart
  // (sys/nft_kernel.h, Kernel::Apply's `sending`).
  uint32_t portid = 0;
};

class KernelEvents {
 public:
  // Subscribes in the calling thread's namespace. `rcvbuf_bytes` is forced
  // (SO_RCVBUFFORCE, CAP_NET_ADMIN) where allowed. Errors: a socket cannot
  // be opened or bound (nftables: no nf_tables in this kernel).
  static Result<KernelEvents> Open(int rcvbuf_bytes = 4 << 20);

  // Waits up to `timeout` for notifications on either socket and returns
  // what arrived (maybe nothing). `*lost` is set when the kernel dropped
  // notifications (ENOBUFS): something may have changed unseen.
  Result<std::vector<KernelEvent>> Wait(std::chrono::milliseconds timeout, bool* lost);

  // The nftables socket, for SetNftListening from another thread (the
  // caller keeps it from being closed meanwhile).
  int nft_fd() const { return nft_.get(); }
  // Leaves (false) or joins (true) NFNLGRP_NFTABLES on `nft_fd`. While no
  // socket of the netns is in the group the kernel builds no notification
  // at all: a commit of tens of thousands of elements spends a third of
  // its time building one per element for its listeners. What changes
  // meanwhile is not seen.
  static Status SetNftListening(int nft_fd, bool on);

 private:
  KernelEvents(UniqueFd rt, UniqueFd nft) : rt_(std::move(rt)), nft_(std::move(nft)), buf_(16384) {}
  Status Drain(int fd, bool nft, std::vector<KernelEvent>* out, bool* lost);
  UniqueFd rt_, nft_;
  std::vector<uint32_t> buf_;  // 64 KiB, nlmsghdr-aligned
};

}  // namespace weft::sys
