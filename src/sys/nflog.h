#pragma once
// The kernel's NFLOG (nfnetlink_log): packets that an nftables rule sends to
// `log group N` arrive on a netlink socket bound to group N. weftd reads the
// drops of NetworkPolicy and of the source guard this way (policy/drop_log.h
// turns them into records). No library: the protocol is a config message to
// bind and one message per packet, parsed here (ParseNflog is pure and
// unit-tested with messages built by hand).
//
// Overload is the kernel's problem, not the reader's: when the socket's
// buffer is full the kernel drops log messages (the reader sees ENOBUFS and
// counts it); the packets themselves were already dropped by their rule.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::sys {

// One logged packet.
struct NflogPacket {
  uint8_t family = 0;        // AF_INET, AF_INET6, AF_BRIDGE (nfgen_family)
  uint16_t hw_protocol = 0;  // the ethertype (host order): 0x0800, 0x86dd, 0x0806
  uint8_t hook = 0;
  std::string prefix;        // the rule's `log prefix`
  uint32_t indev = 0;        // interface indexes, 0 when absent
  uint32_t outdev = 0;
  std::string payload;       // from the network header, at most the copy range
};

// Decodes a buffer of netlink messages as read from an NFLOG socket: every
// NFULNL_MSG_PACKET in it, in order. Other messages (acks, errors) are
// skipped; a truncated message ends the buffer. Errors: kMalformed when the
// first message's header is not a netlink header.
Result<std::vector<NflogPacket>> ParseNflog(std::string_view buf);

// A socket bound to one NFLOG group, copying at most `copy_range` bytes of
// each packet. Move-only; closes in its destructor.
class NflogSocket {
 public:
  // Errors: kBusy when another process has the group (EBUSY), kPermission-
  // like failures as kFailed with errno.
  static Result<NflogSocket> Open(uint16_t group, uint32_t copy_range = 128, int rcvbuf = 1 << 20);
  // Reads what is there, waiting at most `timeout_ms` (poll). An empty vector
  // on timeout. `overruns` (optional) counts ENOBUFS: messages the kernel
  // dropped because the socket's buffer was full.
  Result<std::vector<NflogPacket>> Read(int timeout_ms, uint64_t* overruns = nullptr);
  int fd() const { return fd_.get(); }
  uint16_t group() const { return group_; }

 private:
  NflogSocket(UniqueFd fd, uint16_t group) : fd_(std::move(fd)), group_(group) {}
  UniqueFd fd_;
  uint16_t group_ = 0;
  std::string buf_;
};

// For tests: one NFULNL_MSG_PACKET message as the kernel writes it.
std::string EncodeNflogPacket(const NflogPacket& p);

}  // namespace weft::sys
