#include "sys/nft_set.h"

#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sys/nfnetlink.h"


namespace weft::sys {
namespace {

// nft_data: a nest holding NFTA_DATA_VALUE.
void PutData(NfnlMsg& m, uint16_t type, const std::string& bytes) {
  size_t n = m.Begin(type);
  m.Attr(NFTA_DATA_VALUE, bytes.data(), bytes.size());
  m.End(n);
}

uint16_t NftType(int msg) { return static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg); }

std::string DataValue(const char* p, size_t len) {
  std::string v;
  ForEachNfAttr(p, len, [&](uint16_t t, const char* d, size_t n) {
    if (t == NFTA_DATA_VALUE) v.assign(d, n);
  });
  return v;
}

}  // namespace

Status NftApply(NftFamily family, const std::string& table, const std::vector<NftChange>& changes,
                UniqueFd* keep) {
  if (changes.empty()) return Status::Ok();
  const uint8_t fam = static_cast<uint8_t>(family);
  uint32_t seq = 1;
  std::string batch = NfnlMsg(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq++, AF_UNSPEC, NFNL_SUBSYS_NFTABLES).Done();
  // Only the last message asks for an acknowledgement: the kernel answers
  // every failed message of a batch anyway, and an answer to each of
  // thousands of messages (a run of one change each, when the changes
  // alternate between sets) overflowed the socket's receive buffer
  // (ENOBUFS: the overlay filter at 999 peers).
  size_t last = 0;
  // One message per run of changes to the same set with the same op.
  for (size_t i = 0; i < changes.size();) {
    const NftChange& c = changes[i];
    last = batch.size();
    if (c.op == NftChange::kDeleteTable) {
      NfnlMsg m(NftType(NFT_MSG_DELTABLE), NLM_F_REQUEST, seq++, fam);
      m.Str(NFTA_TABLE_NAME, table);
      batch += m.Done();
      ++i;
      continue;
    }
    const bool add = c.op == NftChange::kAddElement;
    // NFT_MSG_DESTROYSETELEM (Linux 6.3); Debian 12's UAPI headers predate it.
    constexpr int kMsgDestroySetElem = 30;
    const int type = add ? NFT_MSG_NEWSETELEM : c.op == NftChange::kDestroyElement ? kMsgDestroySetElem : NFT_MSG_DELSETELEM;
    NfnlMsg m(NftType(type), NLM_F_REQUEST | (add ? NLM_F_CREATE : 0), seq++, fam);
    m.Str(NFTA_SET_ELEM_LIST_TABLE, table);
    m.Str(NFTA_SET_ELEM_LIST_SET, c.elem.set);
    size_t list = m.Begin(NFTA_SET_ELEM_LIST_ELEMENTS);
    // At most 500 elements per message: a nest's length is 16 bits.
    for (size_t n = 0; n < 500 && i < changes.size() && changes[i].op == c.op && changes[i].elem.set == c.elem.set;
         ++i, ++n) {
      const NftElement& e = changes[i].elem;
      size_t el = m.Begin(NFTA_LIST_ELEM);
      PutData(m, NFTA_SET_ELEM_KEY, e.key);
      if (!e.key_end.empty()) PutData(m, NFTA_SET_ELEM_KEY_END, e.key_end);
      if (add && !e.data.empty()) PutData(m, NFTA_SET_ELEM_DATA, e.data);
      if (e.flags) {
        uint32_t be = htonl(e.flags);
        m.Attr(NFTA_SET_ELEM_FLAGS, &be, sizeof be);
      }
      m.End(el);
    }
    m.End(list);
    batch += m.Done();
  }
  reinterpret_cast<nlmsghdr*>(batch.data() + last)->nlmsg_flags |= NLM_F_ACK;
  batch += NfnlMsg(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq++, AF_UNSPEC, NFNL_SUBSYS_NFTABLES).Done();

  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  // An error answer carries the failed message's header, not its payload.
  const int one = 1;
  (void)::setsockopt(fd.get(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  const std::string what = "nftables batch on table " + table;
  if (batch.size() > 64 * 1024) {
    // The batch goes in one datagram (one transaction): make room for it.
    int size = static_cast<int>(batch.size() + 4096);
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) != 0)
      (void)::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), batch, what));
  // The kernel runs the batch while sendto() is in progress: every answer
  // is queued by the time it returns.
  int first_err = 0;
  bool overrun = false;
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // Answers were lost: only failed messages answer (besides the last),
      // so the batch failed; the answers still queued name the first error.
      if (errno == ENOBUFS) {
        overrun = true;
        continue;
      }
      return NfnlError(what, errno);
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<size_t>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      if (e->error != 0 && first_err == 0) first_err = -e->error;
    }
  }
  if (keep) *keep = std::move(fd);
  if (first_err != 0) return NfnlError(what, first_err);
  if (overrun) return NfnlError(what + ": the kernel's answers overflowed", ENOBUFS);
  return Status::Ok();
}

Result<bool> NftTableExists(NftFamily family, const std::string& table) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  NfnlMsg m(NftType(NFT_MSG_GETTABLE), NLM_F_REQUEST | NLM_F_ACK, 1, static_cast<uint8_t>(family));
  m.Str(NFTA_TABLE_NAME, table);
  const std::string what = "get nftables table " + table;
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), m.Done(), what));
  char buf[8192];
  while (true) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return NfnlError(what, errno);
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<size_t>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) return true;  // the table itself
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      if (e->error == 0) return true;
      if (e->error == -ENOENT) return false;
      return NfnlError(what, -e->error);
    }
  }
}

Result<bool> NftElementExists(NftFamily family, const std::string& table, const std::string& set,
                              const std::string& key) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  NfnlMsg m(NftType(NFT_MSG_GETSETELEM), NLM_F_REQUEST | NLM_F_ACK, 1, static_cast<uint8_t>(family));
  m.Str(NFTA_SET_ELEM_LIST_TABLE, table);
  m.Str(NFTA_SET_ELEM_LIST_SET, set);
  size_t list = m.Begin(NFTA_SET_ELEM_LIST_ELEMENTS);
  size_t el = m.Begin(NFTA_LIST_ELEM);
  PutData(m, NFTA_SET_ELEM_KEY, key);
  m.End(el);
  m.End(list);
  const std::string what = "get an element of nftables set " + table + "/" + set;
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), m.Done(), what));
  // The element (a NEWSETELEM message), then the ack; or only an error.
  bool found = false;
  char buf[8192];
  while (true) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return NfnlError(what, errno);
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<size_t>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) {
        found = true;
        continue;
      }
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      if (e->error == 0) return found;
      if (e->error == -ENOENT) return false;
      return NfnlError(what, -e->error);
    }
  }
}

namespace {

Result<std::vector<NftElement>> DumpElements(NftFamily family, const std::string& table, const std::string& set) {
  WEFT_ASSIGN_OR_RETURN(UniqueFd fd, NfnlConnect());
  NfnlMsg m(NftType(NFT_MSG_GETSETELEM), NLM_F_REQUEST | NLM_F_DUMP, 1, static_cast<uint8_t>(family));
  m.Str(NFTA_SET_ELEM_LIST_TABLE, table);
  m.Str(NFTA_SET_ELEM_LIST_SET, set);
  const std::string what = "dump nftables set " + table + "/" + set;
  WEFT_RETURN_IF_ERROR(NfnlSend(fd.get(), m.Done(), what));
  std::vector<NftElement> out;
  Status st = NfnlReadDump(fd.get(), what, [&](const char* p, size_t len) {
    ForEachNfAttr(p, len, [&](uint16_t t, const char* d, size_t l) {
      if (t != NFTA_SET_ELEM_LIST_ELEMENTS) return;
      ForEachNfAttr(d, l, [&](uint16_t t2, const char* d2, size_t l2) {
        if (t2 != NFTA_LIST_ELEM) return;
        NftElement e;
        e.set = set;
        ForEachNfAttr(d2, l2, [&](uint16_t t3, const char* d3, size_t l3) {
          if (t3 == NFTA_SET_ELEM_KEY) e.key = DataValue(d3, l3);
          if (t3 == NFTA_SET_ELEM_KEY_END) e.key_end = DataValue(d3, l3);
          if (t3 == NFTA_SET_ELEM_DATA) e.data = DataValue(d3, l3);
          if (t3 == NFTA_SET_ELEM_FLAGS && l3 == 4) {
            uint32_t be;
            std::memcpy(&be, d3, sizeof be);
            e.flags = ntohl(be);
          }
        });
        out.push_back(std::move(e));
      });
    });
  });
  if (!st.ok() && st.sys_errno() == ENOENT) return std::vector<NftElement>{};
  if (!st.ok()) return st;
  return out;
}

}  // namespace

Result<std::vector<NftElement>> NftElements(NftFamily family, const std::string& table, const std::string& set) {
  return RetryInterruptedNftDump<std::vector<NftElement>>([&] { return DumpElements(family, table, set); });
}

}  // namespace weft::sys
