#pragma once
// The kernel's NFLOG (nfnetlink_log): packets that an nftables rule sends to
// `log group N` arrive on a netlink socket bound to group N. weftd reads the
// drops of NetworkPolicy and of the source guard this way (policy/drop_log.h
// turns them into records). Through libnetfilter_log, the netfilter project's
// library, in its libmnl interface: the config messages are built with
// nflog_nlmsg_put_header and nflog_attr_put_cfg_*, each packet is decoded by
// nflog_nlmsg_parse, and libmnl owns the socket, walks the messages and reads
// the attributes. Its older interface (nflog_open, nflog_handle_packet,
// nflog_get_*) decodes only through an open handle, a socket of its own:
// ParseNflog here stays pure, a buffer in and packets out, for unit tests
// without root.
//
// Library weft_netfilter (src/sys/CMakeLists.txt), apart from weft_sys: the
// static CNI plugin links weft_sys, and Debian ships no static
// libnetfilter_log.
//
// Overload is the kernel's problem, not the reader's: when the socket's
// buffer is full the kernel drops log messages (the reader sees ENOBUFS and
// counts it); the packets themselves were already dropped by their rule.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

struct mnl_socket;

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
// skipped, and so is a packet whose attributes the library finds malformed;
// a truncated message ends the buffer. Errors: kMalformed when the first
// message's header is not a netlink header. `buf` is aligned as a receive
// buffer is (the start of a std::string's or a vector's data).
Result<std::vector<NflogPacket>> ParseNflog(std::string_view buf);

// A socket bound to one NFLOG group, copying at most `copy_range` bytes of
// each packet. Move-only; closes in its destructor.
class NflogSocket {
 public:
  // Errors: kFailed with the kernel's errno. A group another socket has
  // bound is EPERM (the kernel's answer, as for a caller without
  // CAP_NET_ADMIN: agent_nflog_test); kBusy (EBUSY) is a second bind of a
  // group on the same socket.
  static Result<NflogSocket> Open(uint16_t group, uint32_t copy_range = 128, int rcvbuf = 1 << 20);
  // Reads what is there, waiting at most `timeout_ms` (poll). An empty vector
  // on timeout. `overruns` (optional) counts ENOBUFS: messages the kernel
  // dropped because the socket's buffer was full.
  Result<std::vector<NflogPacket>> Read(int timeout_ms, uint64_t* overruns = nullptr);
  int fd() const;
  uint16_t group() const { return group_; }

 private:
  struct Close {
    void operator()(mnl_socket* nl) const;
  };
  NflogSocket(std::unique_ptr<mnl_socket, Close> nl, uint16_t group) : nl_(std::move(nl)), group_(group) {}
  std::unique_ptr<mnl_socket, Close> nl_;
  uint16_t group_ = 0;
  std::string buf_;
};

// For tests and the benchmark: one NFULNL_MSG_PACKET message as the kernel
// writes it (built with the library's header and libmnl's attributes).
std::string EncodeNflogPacket(const NflogPacket& p);

}  // namespace weft::sys
