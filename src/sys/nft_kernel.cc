#include "sys/nft_kernel.h"

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <fcntl.h>
#include <libnftnl/set.h>
#include <sys/socket.h>

#include <cerrno>
#include <functional>
#include <memory>

#include "sys/nft_codec.h"
#include "sys/nft_nftnl.h"
#include "sys/nft_render.h"

namespace weft::sys::nft {
namespace {

struct SocketCloser {
  void operator()(mnl_socket* s) const { mnl_socket_close(s); }
};
using Socket = std::unique_ptr<mnl_socket, SocketCloser>;

Result<Socket> Open() {
  Socket s(mnl_socket_open(NETLINK_NETFILTER));
  if (!s) return OpError("open a netfilter netlink socket", errno);
  if (mnl_socket_bind(s.get(), 0, MNL_SOCKET_AUTOPID) < 0) return OpError("bind the netfilter netlink socket", errno);
  // Errors come back without the request (CAP_ACK) and with the kernel's
  // message (EXT_ACK); both are optional: older kernels answer without.
  int one = 1;
  (void)mnl_socket_setsockopt(s.get(), NETLINK_CAP_ACK, &one, sizeof one);
  (void)mnl_socket_setsockopt(s.get(), NETLINK_EXT_ACK, &one, sizeof one);
  return s;
}

// The kernel's extended-ack message after an nlmsgerr, if any.
std::string ExtAckMessage(const nlmsghdr* nlh) {
  if (!(nlh->nlmsg_flags & NLM_F_ACK_TLVS)) return "";
  const auto* err = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
  size_t off = sizeof(nlmsgerr);
  if (!(nlh->nlmsg_flags & NLM_F_CAPPED)) off += err->msg.nlmsg_len - sizeof(nlmsghdr);
  const size_t payload = mnl_nlmsg_get_payload_len(nlh);
  if (off >= payload) return "";
  const char* p = static_cast<const char*>(mnl_nlmsg_get_payload(nlh)) + off;
  int len = static_cast<int>(payload - off);
  for (const auto* a = reinterpret_cast<const nlattr*>(p); mnl_attr_ok(a, len); a = mnl_attr_next(a)) {
    len -= static_cast<int>(MNL_ALIGN(a->nla_len));
    if (mnl_attr_get_type(a) == NLMSGERR_ATTR_MSG && mnl_attr_validate(a, MNL_TYPE_NUL_STRING) == 0)
      return mnl_attr_get_str(a);
  }
  return "";
}

constexpr size_t kRecvBuf = 1 << 16;

// The answers' buffer, one per thread: the kernel writes only what it
// sends, so its pages are faulted in as far as answers reach, and never
// zeroed.
char* RecvBuf() {
  thread_local std::unique_ptr<char[]> buf(new char[kRecvBuf]);
  return buf.get();
}

// Reads a dump's answer to NLMSG_DONE: on_msg for each message.
Status ReadDump(mnl_socket* s, const std::string& what, const std::function<Status(const nlmsghdr*)>& on_msg) {
  char* buf = RecvBuf();
  bool interrupted = false;
  for (;;) {
    const ssize_t n = mnl_socket_recvfrom(s, buf, kRecvBuf);
    if (n < 0) return OpError(what, errno);
    int len = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(nlh, len);
         nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_flags & NLM_F_DUMP_INTR) interrupted = true;
      if (nlh->nlmsg_type == NLMSG_DONE) {
        if (interrupted) return OpError(what + " (interrupted by a concurrent commit)", EINTR);
        return Status::Ok();
      }
      if (nlh->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
        if (e->error == 0) return Status::Ok();  // the acknowledgement of a GET
        return OpError(what, -e->error, ExtAckMessage(nlh));
      }
      WEFT_RETURN_IF_ERROR(on_msg(nlh));
    }
  }
}

template <typename F>
std::vector<char> Request(uint16_t type, Family family, uint16_t flags, uint32_t seq, F payload) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = nftnl_nlmsg_build_hdr(buf, type, static_cast<uint16_t>(family), flags, seq);
  payload(nlh);
  return std::vector<char>(buf, buf + nlh->nlmsg_len);
}

Status Send(mnl_socket* s, const std::vector<char>& req, const std::string& what) {
  if (mnl_socket_sendto(s, req.data(), req.size()) < 0) return OpError(what, errno);
  return Status::Ok();
}

// What of a table a dump reads: all of it; its counters and sets (what an
// error message needs to render elements); or only its counters.
enum class Part { kAll, kSets, kCounters };

Result<TableState> DumpOnce(Family family, const std::string& table, Part part = Part::kAll) {
  WEFT_ASSIGN_OR_RETURN(Socket s, Open());
  const std::string name = FamilyName(family) + " " + table;
  TableState state;
  state.family = family;
  uint32_t seq = 1;
  // Each message decoded on its own; only this table's objects are kept
  // (a chain dump lists every table of the family).
  auto keep = [&](const nlmsghdr* nlh) -> Status {
    TableState one;
    WEFT_RETURN_IF_ERROR(DecodeMessage(nlh, &one));
    if (one.table.name != table) return Status::Ok();
    state.table.name = table;
    for (auto& c : one.chains) state.chains.push_back(std::move(c));
    for (auto& r : one.rules) state.rules.push_back(std::move(r));
    for (auto& set : one.sets) state.sets.push_back(std::move(set));
    for (auto& [set, elems] : one.elements)
      for (auto& e : elems) state.elements[set].push_back(std::move(e));
    for (auto& k : one.counters) state.counters.push_back(std::move(k));
    for (auto& l : one.limits) state.limits.push_back(std::move(l));
    return Status::Ok();
  };

  // One request and its answer read to the end; `payload` fills the
  // request from a libnftnl object naming the table (and set).
  auto ask = [&](uint16_t type, uint16_t flags, const std::string& what, const auto& payload) {
    WEFT_RETURN_IF_ERROR(Send(s.get(), Request(type, family, NLM_F_REQUEST | flags, seq++, payload), what));
    return ReadDump(s.get(), what, keep);
  };
  const std::string tname = table;
  TablePtr t(nftnl_table_alloc());
  nftnl_table_set_str(t.get(), NFTNL_TABLE_NAME, tname.c_str());
  // The table itself: ENOENT when it is absent.
  WEFT_RETURN_IF_ERROR(ask(NFT_MSG_GETTABLE, NLM_F_ACK, "get table " + name,
                           [&](nlmsghdr* n) { nftnl_table_nlmsg_build_payload(n, t.get()); }));
  if (state.table.name.empty()) return OpError("get table " + name, ENOENT);
  ObjPtr o(nftnl_obj_alloc());
  nftnl_obj_set_str(o.get(), NFTNL_OBJ_TABLE, tname.c_str());
  // A metrics scrape asks for the counters only; a dump, for every object.
  if (part == Part::kCounters) nftnl_obj_set_u32(o.get(), NFTNL_OBJ_TYPE, NFT_OBJECT_COUNTER);
  WEFT_RETURN_IF_ERROR(ask(NFT_MSG_GETOBJ, NLM_F_DUMP, "list objects " + name,
                           [&](nlmsghdr* n) { nftnl_obj_nlmsg_build_payload(n, o.get()); }));
  if (part == Part::kCounters) return state;
  SetPtr sets(nftnl_set_alloc());
  nftnl_set_set_str(sets.get(), NFTNL_SET_TABLE, tname.c_str());
  WEFT_RETURN_IF_ERROR(ask(NFT_MSG_GETSET, NLM_F_DUMP, "list sets " + name,
                           [&](nlmsghdr* n) { nftnl_set_nlmsg_build_payload(n, sets.get()); }));
  if (part == Part::kSets) return state;
  for (const Set& set : std::vector<Set>(state.sets)) {
    SetPtr q(nftnl_set_alloc());
    nftnl_set_set_str(q.get(), NFTNL_SET_TABLE, tname.c_str());
    nftnl_set_set_str(q.get(), NFTNL_SET_NAME, set.name.c_str());
    WEFT_RETURN_IF_ERROR(ask(NFT_MSG_GETSETELEM, NLM_F_DUMP, "list set " + name + " " + set.name,
                             [&](nlmsghdr* n) { nftnl_set_elems_nlmsg_build_payload(n, q.get()); }));
  }
  ChainPtr c(nftnl_chain_alloc());
  nftnl_chain_set_str(c.get(), NFTNL_CHAIN_TABLE, tname.c_str());
  WEFT_RETURN_IF_ERROR(ask(NFT_MSG_GETCHAIN, NLM_F_DUMP, "list chains " + name,
                           [&](nlmsghdr* n) { nftnl_chain_nlmsg_build_payload(n, c.get()); }));
  RulePtr r(nftnl_rule_alloc());
  nftnl_rule_set_str(r.get(), NFTNL_RULE_TABLE, tname.c_str());
  WEFT_RETURN_IF_ERROR(ask(NFT_MSG_GETRULE, NLM_F_DUMP, "list rules " + name,
                           [&](nlmsghdr* n) { nftnl_rule_nlmsg_build_payload(n, r.get()); }));
  return state;
}

}  // namespace

Status Kernel::Apply(const Transaction& tx) { return Apply(tx, nullptr); }

Status Kernel::Apply(const Transaction& tx, UniqueFd* keep, const std::function<void(uint32_t)>& sending) {
  if (tx.empty()) return Status::Ok();
  constexpr uint32_t kBegin = 1;
  WEFT_ASSIGN_OR_RETURN(std::vector<Message> msgs, EncodeOps(tx, kBegin + 1));
  if (msgs.empty()) return Status::Ok();
  const uint32_t last = kBegin + static_cast<uint32_t>(msgs.size());
  std::string batch;
  char hdr[MNL_SOCKET_BUFFER_SIZE];
  const nlmsghdr* b = nftnl_batch_begin(hdr, kBegin);
  batch.append(hdr, b->nlmsg_len);
  for (auto& m : msgs) {
    if (&m == &msgs.back()) reinterpret_cast<nlmsghdr*>(m.bytes.data())->nlmsg_flags |= NLM_F_ACK;
    batch += m.bytes;
  }
  const nlmsghdr* e = nftnl_batch_end(hdr, last + 1);
  batch.append(hdr, e->nlmsg_len);

  WEFT_ASSIGN_OR_RETURN(Socket s, Open());
  const std::string what = "transaction on table " + FamilyName(tx.family()) + " " + tx.table();
  // The whole batch is one datagram: the socket's send buffer must hold it
  // (the default holds more than 64 KiB).
  if (batch.size() > 64 * 1024) {
    int size = static_cast<int>(batch.size()) + 4096;
    if (setsockopt(mnl_socket_get_fd(s.get()), SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) < 0)
      (void)setsockopt(mnl_socket_get_fd(s.get()), SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  if (sending) sending(mnl_socket_get_portid(s.get()));
  if (mnl_socket_sendto(s.get(), batch.data(), batch.size()) < 0) return OpError("send " + what, errno);

  // Answers: an error for each failing message, then the last message's
  // acknowledgement (or its error).
  char* buf = RecvBuf();
  Status first;
  size_t first_op = 0;
  int errors = 0;
  for (bool done = false; !done;) {
    const ssize_t n = mnl_socket_recvfrom(s.get(), buf, kRecvBuf);
    if (n < 0) {
      if (!first.ok()) break;  // ENOBUFS after errors: the first one is what counts
      return OpError("read the answer to " + what, errno);
    }
    int len = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(nlh, len);
         nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_type != NLMSG_ERROR) continue;
      const auto* err = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
      const uint32_t seq = err->msg.nlmsg_seq;
      if (err->error != 0) {
        ++errors;
        if (first.ok()) {
          first = OpError("batch", -err->error, ExtAckMessage(nlh));
          if (seq > kBegin && seq <= last) first_op = msgs[seq - kBegin - 1].op + 1;
        }
      }
      if (seq == last || seq == kBegin || seq == last + 1) done = true;
    }
  }
  // The socket outlives this call in a duplicate: its release after a
  // commit that deleted objects waits for their destruction.
  if (keep) *keep = UniqueFd(fcntl(mnl_socket_get_fd(s.get()), F_DUPFD_CLOEXEC, 0));
  if (first.ok()) return first;
  std::string what_failed = first.msg();
  if (first_op) {
    // Named in nft's words; elements with their set's types, read from the
    // table as it still is (nothing was applied).
    std::vector<Set> known;
    if (std::holds_alternative<Elements>(tx.ops()[first_op - 1].object)) {
      auto sets = DumpOnce(tx.family(), tx.table(), Part::kSets);
      if (sets.ok()) known = sets->sets;
    }
    what_failed = "nftables: " + DescribeOp(tx, first_op - 1, known);
  }
  std::string details = first.details();
  if (errors > 1)
    details += " (and " + std::to_string(errors - 1) + " later error" + (errors > 2 ? "s" : "") + " in the batch)";
  return Status::Error(first.reason(), first.domain(), what_failed + " (nothing of the transaction was applied)",
                       details, first.sys_errno());
}

Result<TableState> Kernel::Dump(Family family, const std::string& table) {
  return RetryInterruptedNftDump<TableState>([&] { return DumpOnce(family, table); });
}

namespace {

// One request of `family` and its answer read to the end, every message
// decoded into `state` (only `table`'s objects kept). An absent table, chain
// or set is the kernel's ENOENT.
Status Ask(Family family, const std::string& table, uint16_t type, uint16_t flags, const std::string& what,
           const std::function<void(nlmsghdr*)>& payload, TableState* state, bool rule_exprs = true) {
  WEFT_ASSIGN_OR_RETURN(Socket s, Open());
  WEFT_RETURN_IF_ERROR(Send(s.get(), Request(type, family, NLM_F_REQUEST | flags, 1, payload), what));
  state->family = family;
  return ReadDump(s.get(), what, [&](const nlmsghdr* nlh) -> Status {
    TableState one;
    WEFT_RETURN_IF_ERROR(DecodeMessage(nlh, &one, rule_exprs));
    if (one.table.name != table) return Status::Ok();
    state->table.name = table;
    for (auto& c : one.chains) state->chains.push_back(std::move(c));
    for (auto& r : one.rules) state->rules.push_back(std::move(r));
    for (auto& [set, elems] : one.elements)
      for (auto& e : elems) state->elements[set].push_back(std::move(e));
    return Status::Ok();
  });
}

SetPtr NamedSet(const std::string& table, const std::string& set) {
  SetPtr q(nftnl_set_alloc());
  nftnl_set_set_str(q.get(), NFTNL_SET_TABLE, table.c_str());
  nftnl_set_set_str(q.get(), NFTNL_SET_NAME, set.c_str());
  return q;
}

}  // namespace

Result<bool> Kernel::TableExists(Family family, const std::string& table) {
  TablePtr t(nftnl_table_alloc());
  nftnl_table_set_str(t.get(), NFTNL_TABLE_NAME, table.c_str());
  TableState state;
  Status st = Ask(family, table, NFT_MSG_GETTABLE, NLM_F_ACK, "get table " + FamilyName(family) + " " + table,
                  [&](nlmsghdr* n) { nftnl_table_nlmsg_build_payload(n, t.get()); }, &state);
  if (!st.ok() && st.sys_errno() == ENOENT) return false;
  if (!st.ok()) return st;
  return !state.table.name.empty();
}

Result<std::vector<Chain>> Kernel::Chains(Family family, const std::string& table) {
  return RetryInterruptedNftDump<std::vector<Chain>>([&]() -> Result<std::vector<Chain>> {
    ChainPtr c(nftnl_chain_alloc());
    nftnl_chain_set_str(c.get(), NFTNL_CHAIN_TABLE, table.c_str());
    TableState state;
    WEFT_RETURN_IF_ERROR(Ask(family, table, NFT_MSG_GETCHAIN, NLM_F_DUMP,
                             "list chains " + FamilyName(family) + " " + table,
                             [&](nlmsghdr* n) { nftnl_chain_nlmsg_build_payload(n, c.get()); }, &state));
    return std::move(state.chains);
  });
}

Result<std::vector<Rule>> Kernel::RuleHeads(Family family, const std::string& table, const std::string& chain) {
  return RetryInterruptedNftDump<std::vector<Rule>>([&]() -> Result<std::vector<Rule>> {
    RulePtr r(nftnl_rule_alloc());
    nftnl_rule_set_str(r.get(), NFTNL_RULE_TABLE, table.c_str());
    if (!chain.empty()) nftnl_rule_set_str(r.get(), NFTNL_RULE_CHAIN, chain.c_str());
    TableState state;
    WEFT_RETURN_IF_ERROR(Ask(family, table, NFT_MSG_GETRULE, NLM_F_DUMP,
                             "list rules " + FamilyName(family) + " " + table + (chain.empty() ? "" : " " + chain),
                             [&](nlmsghdr* n) { nftnl_rule_nlmsg_build_payload(n, r.get()); }, &state,
                             /*rule_exprs=*/false));
    std::vector<Rule> out;
    for (auto& rule : state.rules)
      if (chain.empty() || rule.chain == chain) out.push_back(std::move(rule));
    return out;
  });
}

Result<std::vector<Element>> Kernel::SetElements(Family family, const std::string& table, const std::string& set) {
  return RetryInterruptedNftDump<std::vector<Element>>([&]() -> Result<std::vector<Element>> {
    SetPtr q = NamedSet(table, set);
    TableState state;
    WEFT_RETURN_IF_ERROR(Ask(family, table, NFT_MSG_GETSETELEM, NLM_F_DUMP,
                             "list set " + FamilyName(family) + " " + table + " " + set,
                             [&](nlmsghdr* n) { nftnl_set_elems_nlmsg_build_payload(n, q.get()); }, &state));
    return std::move(state.elements[set]);
  });
}

Result<bool> Kernel::HasElement(Family family, const std::string& table, const std::string& set,
                                const std::string& key) {
  SetPtr q = NamedSet(table, set);
  nftnl_set_elem* e = nftnl_set_elem_alloc();
  nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key.data(), static_cast<uint32_t>(key.size()));
  nftnl_set_elem_add(q.get(), e);
  TableState state;
  Status st = Ask(family, table, NFT_MSG_GETSETELEM, NLM_F_ACK,
                  "get an element of set " + FamilyName(family) + " " + table + " " + set,
                  [&](nlmsghdr* n) { nftnl_set_elems_nlmsg_build_payload(n, q.get()); }, &state);
  if (!st.ok() && st.sys_errno() == ENOENT) return false;
  if (!st.ok()) return st;
  return !state.elements[set].empty();
}

Result<std::vector<NamedCounter>> Kernel::Counters(Family family, const std::string& table) {
  WEFT_ASSIGN_OR_RETURN(TableState t, RetryInterruptedNftDump<TableState>(
                                          [&] { return DumpOnce(family, table, Part::kCounters); }));
  return std::move(t.counters);
}

}  // namespace weft::sys::nft
