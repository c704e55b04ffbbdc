#include "bench/nftwatch.h"

#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "bench/ns.h"
#include "sys/netns.h"

namespace weft::bench {

namespace {

// The attributes of an nlattr stream, one at a time.
struct Attr {
  uint16_t type;
  std::string_view data;
};

template <typename Fn>
void ForEachAttr(std::string_view s, Fn&& fn) {
  while (s.size() >= sizeof(nlattr)) {
    nlattr a;
    std::memcpy(&a, s.data(), sizeof a);
    if (a.nla_len < sizeof(nlattr) || a.nla_len > s.size()) return;
    fn(Attr{static_cast<uint16_t>(a.nla_type & NLA_TYPE_MASK), s.substr(NLA_HDRLEN, a.nla_len - NLA_HDRLEN)});
    size_t step = NLA_ALIGN(a.nla_len);
    if (step >= s.size()) return;
    s.remove_prefix(step);
  }
}

std::string_view CString(std::string_view v) {
  auto nul = v.find('\0');
  return nul == std::string_view::npos ? v : v.substr(0, nul);
}

}  // namespace

std::string Ipv4Bytes(const std::string& dotted) {
  in_addr a{};
  if (::inet_pton(AF_INET, dotted.c_str(), &a) != 1) return {};
  return std::string(reinterpret_cast<const char*>(&a), 4);
}

std::string PortCmpBytes(uint16_t port) {
  const char hdr[4] = {6, 0, 1, 0};  // nla_len 6, NFTA_DATA_VALUE
  uint16_t be = htons(port);
  return std::string(hdr, 4) + std::string(reinterpret_cast<const char*>(&be), 2);
}

Result<NftWatch> NftWatch::Open(const std::string& netns_path, const std::string& table) {
  // A full replace of a big table announces every element; the kernel
  // packs notifications into page-sized messages, but tens of MB of them
  // arrive in one burst.
  WEFT_ASSIGN_OR_RETURN(auto sock, OpenNetlinkListener(netns_path, NETLINK_NETFILTER, 0, 256 << 20, "netlink netfilter"));
  // NFNLGRP_NFTABLES is past the 32 groups a bind can name.
  int group = NFNLGRP_NFTABLES;
  if (::setsockopt(sock.get(), SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &group, sizeof group) != 0)
    return Status::FromErrno(Reason::kFailed, Domain::kKernel, "join NFNLGRP_NFTABLES", errno);
  return NftWatch(std::move(sock), table);
}

void NftWatch::Drain() {
  std::vector<char> buf(1 << 16);
  for (;;) {
    ssize_t n = ::recv(fd_.get(), buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOBUFS) {
      ++overflows_;
      continue;
    }
    if (n <= 0) break;
  }
  cur_ = NftTxn{};
  cur_matched_ = false;
  pending_.clear();
}

std::optional<NftTxn> NftWatch::Feed(std::string_view data, Clock::time_point at,
                                     const std::function<bool(const NftMsg&)>& match) {
  while (data.size() >= sizeof(nlmsghdr)) {
    nlmsghdr h;
    std::memcpy(&h, data.data(), sizeof h);
    if (h.nlmsg_len < sizeof(nlmsghdr) || h.nlmsg_len > data.size()) break;
    std::string_view msg = data.substr(0, h.nlmsg_len);
    data.remove_prefix(std::min<size_t>(NLMSG_ALIGN(h.nlmsg_len), data.size()));
    if ((h.nlmsg_type >> 8) != NFNL_SUBSYS_NFTABLES) continue;
    const uint8_t type = static_cast<uint8_t>(h.nlmsg_type & 0xff);
    const size_t hdr = NLMSG_ALIGN(NLMSG_LENGTH(sizeof(nfgenmsg)));
    if (msg.size() < hdr) continue;
    std::string_view attrs = msg.substr(hdr);
    if (type == NFT_MSG_NEWGEN) {
      NftTxn done = cur_;
      done.at = at;
      ForEachAttr(attrs, [&](const Attr& a) {
        if (a.type == NFTA_GEN_ID && a.data.size() >= 4) {
          uint32_t g;
          std::memcpy(&g, a.data.data(), 4);
          done.gen = ntohl(g);
        }
      });
      bool matched = cur_matched_;
      cur_ = NftTxn{};
      cur_matched_ = false;
      if (matched) {
        // What follows belongs to later transactions: kept for the next call.
        pending_.assign(data);
        pending_at_ = at;
        return done;
      }
      continue;
    }
    NftMsg m;
    m.type = type;
    m.attrs = attrs;
    ForEachAttr(attrs, [&](const Attr& a) {
      if (a.type == 1) m.table = CString(a.data);  // NFTA_{TABLE_NAME,CHAIN_TABLE,RULE_TABLE,SET_TABLE,...}
      if ((type == NFT_MSG_NEWSETELEM || type == NFT_MSG_DELSETELEM) && a.type == NFTA_SET_ELEM_LIST_ELEMENTS)
        ForEachAttr(a.data, [&](const Attr&) { ++m.elements; });
    });
    if (m.table != table_) continue;
    ++cur_.messages;
    cur_.bytes += attrs.size();
    switch (type) {
      case NFT_MSG_NEWTABLE:
        ++cur_.new_tables;
        break;
      case NFT_MSG_NEWCHAIN:
        ++cur_.new_chains;
        break;
      case NFT_MSG_NEWRULE:
        ++cur_.new_rules;
        break;
      case NFT_MSG_DELRULE:
        ++cur_.del_rules;
        break;
      case NFT_MSG_NEWSET:
        ++cur_.new_sets;
        break;
      case NFT_MSG_DELSET:
        ++cur_.del_sets;
        break;
      case NFT_MSG_NEWSETELEM:
        cur_.new_elements += m.elements;
        break;
      case NFT_MSG_DELSETELEM:
        cur_.del_elements += m.elements;
        break;
      default:
        break;
    }
    if (!cur_matched_ && match(m)) cur_matched_ = true;
  }
  return std::nullopt;
}

Result<NftTxn> NftWatch::WaitTxn(const std::function<bool(const NftMsg&)>& match, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  const int overflows_before = overflows_;
  auto finish = [&](const NftTxn& t) -> Result<NftTxn> {
    if (overflows_ != overflows_before)
      return Status::Error(Reason::kInternal, Domain::kNone,
                           "nftables notifications overflowed the socket buffer (some were lost)");
    return t;
  };
  if (!pending_.empty()) {
    std::string data = std::move(pending_);
    pending_.clear();
    if (auto t = Feed(data, pending_at_, match)) return finish(*t);
  }
  std::vector<char> buf(1 << 20);
  for (;;) {
    for (;;) {
      ssize_t n = ::recv(fd_.get(), buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == ENOBUFS) {
        ++overflows_;
        continue;
      }
      if (n < 0) return Status::FromErrno(Reason::kFailed, Domain::kKernel, "recv nftables notifications", errno);
      if (auto t = Feed(std::string_view(buf.data(), static_cast<size_t>(n)), Clock::now(), match)) return finish(*t);
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0)
      return Status::Error(Reason::kInternal, Domain::kNone,
                           "no matching nftables transaction within " + std::to_string(timeout.count()) + " ms");
    pollfd p{fd_.get(), POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(std::min<long>(left, 200)));
    CheckInterrupt();
  }
}

}  // namespace weft::bench
