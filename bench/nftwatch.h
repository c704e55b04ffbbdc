#pragma once
// Seeing nftables transactions land in a netns's kernel, from outside the
// program that makes them: a NETLINK_NETFILTER socket subscribed to
// NFNLGRP_NFTABLES receives every object a committed transaction created or
// deleted (tables, chains, rules with their expressions and comments, sets,
// set elements), then one NFT_MSG_NEWGEN that closes the transaction. The
// time a transaction is "in the kernel" is when its NEWGEN is received: the
// kernel sends the notifications after the commit, so by then every packet
// already sees the new rules.
//
// Used by the NetworkPolicy section (bench/netpol_main.cc) to time "an API
// event until its rules are enforced" without asking weftd.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::bench {

// One notification of a transaction (the nlmsg payload after nfgenmsg).
struct NftMsg {
  uint8_t type = 0;        // NFT_MSG_NEWRULE, NFT_MSG_DELSETELEM, ...
  std::string_view table;  // the table it belongs to (attribute 1 of every nf_tables object)
  std::string_view attrs;  // the raw attributes, for byte searches
  int elements = 0;        // set element messages: how many elements
};

// What one transaction did to the watched table.
struct NftTxn {
  std::chrono::steady_clock::time_point at{};  // NEWGEN received
  uint32_t gen = 0;
  int messages = 0;  // in the watched table
  size_t bytes = 0;  // their attribute bytes
  int new_tables = 0, new_chains = 0, new_rules = 0, del_rules = 0, new_sets = 0, del_sets = 0;
  int new_elements = 0, del_elements = 0;
};

class NftWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // Subscribes in the netns at `netns_path`; only objects of table
  // `family`/`table` count (family: NFPROTO_INET etc.).
  static Result<NftWatch> Open(const std::string& netns_path, const std::string& table);

  // Reads notifications until a transaction in which `match` returned true
  // for at least one message of the table is complete (its NEWGEN arrived);
  // returns that transaction. Transactions already received before the call
  // that were not matched are skipped. `match` may keep state (e.g. "all of
  // these addresses seen"). Error (internal) after `timeout` or when the
  // socket overflowed (ENOBUFS: notifications were lost, so no answer is
  // trustworthy); throws Interrupted (bench/ns.h) on SIGINT/SIGTERM.
  Result<NftTxn> WaitTxn(const std::function<bool(const NftMsg&)>& match, std::chrono::milliseconds timeout);

  // Drops whatever was queued so far (the next WaitTxn sees only later
  // transactions).
  void Drain();

  int overflows() const { return overflows_; }

 private:
  explicit NftWatch(UniqueFd fd, std::string table) : fd_(std::move(fd)), table_(std::move(table)) {}
  // Processes received messages; the matched transaction once its NEWGEN is
  // in `data` (the rest of `data` is kept in pending_).
  std::optional<NftTxn> Feed(std::string_view data, Clock::time_point at,
                             const std::function<bool(const NftMsg&)>& match);
  UniqueFd fd_;
  std::string table_;
  int overflows_ = 0;
  NftTxn cur_;
  bool cur_matched_ = false;
  std::string pending_;  // received after the last matched NEWGEN
  Clock::time_point pending_at_{};
};

// Byte patterns to look for in NftMsg::attrs.
// An IPv4 address as nft puts it in a set element key or a rule's cmp data.
std::string Ipv4Bytes(const std::string& dotted);
// A 16-bit port as a rule's cmp data: the NFTA_DATA_VALUE attribute
// (length 6, type 1) followed by the port in network order.
std::string PortCmpBytes(uint16_t port);

}  // namespace weft::bench
