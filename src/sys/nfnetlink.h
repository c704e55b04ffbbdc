#pragma once
// The raw nfnetlink pieces of src/sys's conntrack code (conntrack.cc;
// nftables goes through libnftnl: sys/nft_kernel.h): one message builder, one
// socket, one send, one dump reader, one attribute walker. Only the kernel's wire format lives here; what a
// message means is the caller's.

#include <linux/netlink.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace weft::sys {

// An error of the firewall domain carrying the kernel's errno.
Status NfnlError(const std::string& what, int err);

// A netlink message under construction: header, nfgenmsg, attributes.
class NfnlMsg {
 public:
  NfnlMsg(uint16_t type, uint16_t flags, uint32_t seq, uint8_t family, uint16_t res_id = 0);
  void Attr(uint16_t type, const void* data, size_t len);
  void Str(uint16_t type, const std::string& s) { Attr(type, s.c_str(), s.size() + 1); }
  // A 32-bit value in network byte order.
  void U32Be(uint16_t type, uint32_t v);
  // An attribute whose bytes (header included) were read from the kernel,
  // sent back as they came.
  void Raw(const void* attr, size_t len);
  size_t Begin(uint16_t type);  // a nested attribute; End() closes it
  void End(size_t at);
  std::string Done();  // the message, its length set

 private:
  void Put(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  void Align();
  std::string buf_;
};

// A NETLINK_NETFILTER socket bound in the calling thread's network
// namespace, with NETLINK_CAP_ACK (errors come back without the request).
Result<UniqueFd> NfnlConnect();

// One datagram to the kernel; a short send is an error.
Status NfnlSend(int fd, const std::string& buf, const std::string& what);

// Reads the answer to a dump request sent on `fd` to its end: on_msg(the
// attributes after the message's nfgenmsg, their length) for each message.
// A dump the kernel interrupted (NLM_F_DUMP_INTR: a concurrent commit) is an
// error with EINTR, read to its end first (RetryInterruptedNftDump asks
// again); an error the kernel answers is NfnlError(what, its errno), so
// callers tell ENOENT (no such table or set) apart.
Status NfnlReadDump(int fd, const std::string& what, const std::function<void(const char*, size_t)>& on_msg);
// The same loop for a caller that needs each whole message (its nfgenmsg's
// family, as conntrack's entries do): on_msg(the message) for each one
// that is neither DONE nor an error.
Status NfnlReadDumpMessages(int fd, const std::string& what, const std::function<void(const nlmsghdr*)>& on_msg);

// The attributes of a message (after its nfgenmsg) or of a nest: f(type
// without flag bits, payload, payload length). Stops at a malformed one.
template <typename F>
void ForEachNfAttr(const char* p, size_t len, F f) {
  while (len >= NLA_HDRLEN) {
    nlattr a;
    std::memcpy(&a, p, sizeof a);
    if (a.nla_len < NLA_HDRLEN || a.nla_len > len) return;
    f(static_cast<uint16_t>(a.nla_type & NLA_TYPE_MASK), p + NLA_HDRLEN, static_cast<size_t>(a.nla_len - NLA_HDRLEN));
    size_t step = NLA_ALIGN(a.nla_len);
    if (step >= len) return;
    p += step;
    len -= step;
  }
}

}  // namespace weft::sys
