#pragma once
// The typed nftables objects Weft writes and reads back (issue 30): tables,
// base and regular chains, rules as expression lists, sets and maps,
// elements and named counters, and a Transaction of them that one backend
// applies all or nothing. The objects are in the kernel's terms (registers,
// payload offsets, NFT_* constants from <linux/netfilter/nf_tables.h>), as
// libnftnl's are: sys/nft_codec.h encodes them with libnftnl, sys/nft_kernel.h
// sends them, sys/nft_fake.h holds them for tests, sys/nft_render.h prints
// them in nft's syntax.
//
// Part of weft_nft, a library of its own in the sys layer: the CNI plugin
// (a static binary) does not link it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "sys/nft_family.h"

namespace weft::sys::nft {

using Family = NftFamily;

// nft's data type ids (nftables' include/datatype.h), as a set's key and
// data types carry them; a concatenation is its types' ids, 6 bits each,
// the first field highest (ConcatType).
enum DataType : uint32_t {
  kTypeVerdict = 1,
  kTypeInteger = 4,
  kTypeString = 5,
  kTypeIpv4 = 7,
  kTypeIpv6 = 8,
  kTypeEther = 9,
  kTypeInetProto = 12,
  kTypeInetService = 13,
  kTypeMark = 19,
  kTypeCtState = 26,
  kTypeIcmp6Type = 29,
  kTypeIfname = 41,
};
uint32_t ConcatType(const std::vector<DataType>& fields);
// The fields of a (possibly concatenated) type id, first first.
std::vector<DataType> ConcatFields(uint32_t type);
// The bytes of one field of `t` (0 when it depends on the set: integer, string).
uint32_t DataTypeLen(DataType t);

// Expressions. Registers are the kernel's numbers: NFT_REG_VERDICT (0),
// NFT_REG_1..4 (16 bytes each) or NFT_REG32_00.. (4 bytes, for
// concatenations: each field starts at the next 4-byte register).
struct Meta {
  uint32_t key = 0;  // NFT_META_*
  uint32_t dreg = 1;
  bool operator==(const Meta&) const = default;
};
struct Payload {
  uint32_t base = 0;  // NFT_PAYLOAD_{LL,NETWORK,TRANSPORT}_HEADER
  uint32_t offset = 0, len = 0;  // bytes
  uint32_t dreg = 1;
  bool operator==(const Payload&) const = default;
};
struct Ct {
  uint32_t key = 0;  // NFT_CT_*
  uint32_t dreg = 1;
  std::optional<uint8_t> dir;  // IP_CT_DIR_ORIGINAL/REPLY for the keys that take one
  bool operator==(const Ct&) const = default;
};
struct Cmp {
  uint32_t op = 0;  // NFT_CMP_EQ, NEQ, LT, LTE, GT, GTE
  std::string data;
  uint32_t sreg = 1;
  bool operator==(const Cmp&) const = default;
};
// dreg = (sreg & mask) ^ xor over len bytes.
struct Bitwise {
  uint32_t sreg = 1, dreg = 1, len = 0;
  std::string mask, xor_;
  bool operator==(const Bitwise&) const = default;
};
// `sreg` in @set; with dreg, the map's data for it into dreg (NFT_REG_VERDICT:
// a verdict map, the verdict taken).
struct Lookup {
  std::string set;
  uint32_t sreg = 1;
  std::optional<uint32_t> dreg;
  bool invert = false;
  bool operator==(const Lookup&) const = default;
};
// Data loaded into a register (a NAT address, a mark).
struct Immediate {
  uint32_t dreg = 1;
  std::string data;
  bool operator==(const Immediate&) const = default;
};
// accept, drop, return, continue (NF_*, NFT_*), jump or goto `chain`.
struct Verdict {
  int32_t code = 0;
  std::string chain;
  bool operator==(const Verdict&) const = default;
};
// An anonymous counter (the packets and bytes are what a dump reads).
struct Counter {
  uint64_t packets = 0, bytes = 0;
  bool operator==(const Counter&) const = default;
};
// `counter name "x"`: a reference to a named counter of the table.
struct CounterRef {
  std::string name;
  bool operator==(const CounterRef&) const = default;
};
// `fib daddr type` (flags NFTA_FIB_F_*, result NFT_FIB_RESULT_*) into dreg.
struct Fib {
  uint32_t flags = 0, result = 0;
  uint32_t dreg = 1;
  bool operator==(const Fib&) const = default;
};
// `meta mark set <sreg>`: a meta key written from a register.
struct MetaSet {
  uint32_t key = 0;  // NFT_META_*
  uint32_t sreg = 1;
  bool operator==(const MetaSet&) const = default;
};
// `limit name "x"`: a reference to a named limit of the table.
struct LimitRef {
  std::string name;
  bool operator==(const LimitRef&) const = default;
};
// `log`: with group, to NFLOG group `group` (snaplen, qthreshold apply).
struct Log {
  std::string prefix;
  std::optional<uint16_t> group;
  uint32_t snaplen = 0;
  uint16_t qthreshold = 0;
  bool operator==(const Log&) const = default;
};
// snat/dnat (type NFT_NAT_SNAT/DNAT) or masquerade (masq) to the address
// in reg_addr (0: none) and port in reg_proto (0: none).
struct Nat {
  uint32_t type = 0;
  bool masq = false;
  uint32_t family = 0;  // NFPROTO_IPV4/IPV6 (snat/dnat)
  uint32_t reg_addr = 0, reg_proto = 0;
  // NF_NAT_RANGE_* (e.g. PROTO_RANDOM_FULLY); MAP_IPS and PROTO_SPECIFIED
  // follow from the registers and are neither sent nor read back.
  uint32_t flags = 0;
  bool operator==(const Nat&) const = default;
};
// `numgen inc|random mod modulus offset offset` into dreg.
struct Numgen {
  uint32_t type = 0;  // NFT_NG_INCREMENTAL / NFT_NG_RANDOM
  uint32_t modulus = 0, offset = 0;
  uint32_t dreg = 1;
  bool operator==(const Numgen&) const = default;
};
// `limit rate rate/unit burst burst packets|bytes`; unit in seconds.
struct Limit {
  uint64_t rate = 0, unit = 1;
  uint32_t burst = 0;
  uint32_t type = 0;  // NFT_LIMIT_PKTS / NFT_LIMIT_PKT_BYTES
  bool invert = false;  // `limit rate over`
  bool operator==(const Limit&) const = default;
};

// `reject`: type NFT_REJECT_ICMP_UNREACH (ip, ip6: `code` an ICMP / ICMPv6
// unreachable code), NFT_REJECT_TCP_RST (no code), NFT_REJECT_ICMPX_UNREACH
// (inet, bridge: `code` NFT_REJECT_ICMPX_*, the packet's family's ICMP). A
// terminal statement: the packet is dropped after the reply is sent.
struct Reject {
  uint32_t type = 0;
  uint8_t code = 0;
  bool operator==(const Reject&) const = default;
};
// `update @set { <key> }` (op NFT_DYNSET_OP_UPDATE; _ADD: `add`, _DELETE:
// `delete`): the key in sreg_key written into `set` from the packet path,
// its timeout refreshed (timeout_ms 0: the set's default). The set needs
// NFT_SET_EVAL (`flags dynamic`), and NFT_SET_TIMEOUT for timeouts.
struct Dynset {
  uint32_t op = 0;
  std::string set;
  uint32_t sreg_key = 1;
  uint64_t timeout_ms = 0;
  bool operator==(const Dynset&) const = default;
};

using Expr = std::variant<Meta, Payload, Ct, Cmp, Bitwise, Lookup, Immediate, Verdict, Counter, CounterRef, Log, Nat,
                          Numgen, Limit, LimitRef, Fib, MetaSet, Reject, Dynset>;

// The register the kernel reports for `reg`: a 4-byte register that starts
// a 16-byte one is that one (NFT_REG32_00 is NFT_REG_1, NFT_REG32_04 is
// NFT_REG_2, ...), as a dump reads it back.
uint32_t CanonicalRegister(uint32_t reg);

// Whether `set` is an anonymous set's name (a transaction's or the kernel's).
bool IsAnonymousSetName(const std::string& set);

struct Table {
  std::string name;
  bool operator==(const Table&) const = default;
};

// A base chain's hook. `device` only for netdev's ingress.
struct Hook {
  uint32_t num = 0;  // NF_INET_* / NF_NETDEV_INGRESS
  int32_t priority = 0;
  std::string type = "filter";  // filter, nat, route
  std::string device;
  uint32_t policy = 1;  // NF_ACCEPT or NF_DROP
  bool operator==(const Hook&) const = default;
};

struct Chain {
  std::string name;
  std::optional<Hook> hook;  // nullopt: a regular chain
  bool operator==(const Chain&) const = default;
};

struct Rule {
  std::string chain;
  std::vector<Expr> exprs;
  std::string comment;
  uint64_t handle = 0;  // what a dump read; ignored when adding
  bool operator==(const Rule&) const = default;
};

// `r` with every register canonical (what a dump of it reads).
Rule CanonicalRule(Rule r);

// NFT_SET_* flags.
//
// An anonymous set (NFT_SET_ANONYMOUS | NFT_SET_CONSTANT: `{ a, b }` in a
// rule) lives as long as the rule that looks it up. A transaction names it
// with a name of its own that starts with "__set" (a Lookup and the
// Elements op refer to it by that name); it is sent as nft sends it,
// "__set%d" with an id the rule and elements refer to, and the kernel names
// it "__set<N>" (the lowest N free in the table), which is what a dump reads
// back.
struct Set {
  std::string name;
  uint32_t flags = 0;  // NFT_SET_INTERVAL, NFT_SET_TIMEOUT, NFT_SET_MAP, NFT_SET_CONCAT, ...
  uint32_t key_type = 0, key_len = 0;
  uint32_t data_type = 0, data_len = 0;  // maps (NFT_SET_MAP): kTypeVerdict for a verdict map
  // A concatenation's field lengths in bytes (unpadded); needed with
  // NFT_SET_INTERVAL (pipapo).
  std::vector<uint32_t> fields;
  uint64_t timeout_ms = 0;  // the elements' default (NFT_SET_TIMEOUT)
  // nft's metadata of the set (key byte order, `typeof`), opaque to the
  // kernel; what sys/nft_udata.h makes, so nft lists the set as declared.
  std::string userdata;
  bool operator==(const Set&) const = default;
};

struct Element {
  std::string key;      // the key's bytes, each concatenated field padded to 4
  std::string key_end;  // a concatenated range's inclusive end ("" otherwise)
  std::string data;     // a data map's value
  std::optional<Verdict> verdict;  // a verdict map's value
  uint32_t flags = 0;   // NFT_SET_ELEM_INTERVAL_END: a one-field range's exclusive end
  uint64_t timeout_ms = 0;
  bool operator==(const Element&) const = default;
};

// Elements of one set, as a transaction adds or deletes them.
struct Elements {
  std::string set;
  std::vector<Element> elems;
  bool operator==(const Elements&) const = default;
};

// A named counter object (`counter x {}`), what CounterRef names.
struct NamedCounter {
  std::string name;
  uint64_t packets = 0, bytes = 0;
  bool operator==(const NamedCounter&) const = default;
};

// A named limit object (`limit x { rate 10/second burst 5 packets; }`), what
// LimitRef names: one token bucket shared by every rule that refers to it.
struct NamedLimit {
  std::string name;
  uint64_t rate = 0, unit = 1;  // unit in seconds
  uint32_t burst = 0;
  uint32_t type = 0;  // NFT_LIMIT_PKTS / NFT_LIMIT_PKT_BYTES
  bool invert = false;
  bool operator==(const NamedLimit&) const = default;
};

using Object = std::variant<Table, Chain, Rule, Set, Elements, NamedCounter, NamedLimit>;

// What a transaction does with an object, as nft's commands:
//   kAdd     add: created when missing, an existing one kept (a chain's
//            policy updated); a Rule is appended, Elements added
//   kCreate  create: EEXIST when it exists
//   kDelete  delete: ENOENT when missing (a Rule is deleted by handle)
//   kDestroy destroy: as delete, absent is no error (Linux 6.3+)
//   kFlush   flush: a Table's or Chain's rules, a Set's elements
enum class Verb { kAdd, kCreate, kDelete, kDestroy, kFlush };
// The verb's nft word ("add", ...), and back (nullopt for any other word).
const char* VerbName(Verb v);
std::optional<Verb> VerbFromName(const std::string& name);

struct Op {
  Verb verb = Verb::kAdd;
  Object object;
  bool operator==(const Op&) const = default;
};

// A transaction of one table: every op applied in order in one kernel
// transaction (one nfnetlink batch), all or none.
class Transaction {
 public:
  Transaction(Family family, std::string table) : family_(family), table_(std::move(table)) {}
  Family family() const { return family_; }
  const std::string& table() const { return table_; }
  const std::vector<Op>& ops() const { return ops_; }
  bool empty() const { return ops_.empty(); }

  Transaction& Add(Object o) { return Push(Verb::kAdd, std::move(o)); }
  Transaction& Create(Object o) { return Push(Verb::kCreate, std::move(o)); }
  Transaction& Delete(Object o) { return Push(Verb::kDelete, std::move(o)); }
  Transaction& Destroy(Object o) { return Push(Verb::kDestroy, std::move(o)); }
  Transaction& Flush(Object o) { return Push(Verb::kFlush, std::move(o)); }
  Transaction& Push(Verb v, Object o) {
    ops_.push_back({v, std::move(o)});
    return *this;
  }
  // Every op of `other` (of the same table) after this one's.
  Transaction& Append(Transaction&& other) {
    for (auto& op : other.ops_) ops_.push_back(std::move(op));
    other.ops_.clear();
    return *this;
  }

 private:
  Family family_;
  std::string table_;
  std::vector<Op> ops_;
};

// A table as a dump reads it: its objects in the kernel's order (rules by
// chain in chain order, elements by set). Anonymous sets are among the sets,
// with their elements.
struct TableState {
  Family family = Family::kInet;
  Table table;
  std::vector<Chain> chains;
  std::vector<Rule> rules;
  std::vector<Set> sets;
  std::map<std::string, std::vector<Element>> elements;
  std::vector<NamedCounter> counters;
  std::vector<NamedLimit> limits;
  bool operator==(const TableState&) const = default;
};

// Where transactions go: the kernel (sys/nft_kernel.h) or a fake
// (sys/nft_fake.h). Errors name the failing op (its nft command) and carry
// the kernel's errno, the same from both: ENOENT (a missing table, chain,
// set, element), EEXIST (create of an existing object), EBUSY (delete of a
// chain or set in use), EINVAL (a key of the wrong length).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Status Apply(const Transaction& tx) = 0;
  // The table, or a NotFound error when it does not exist.
  virtual Result<TableState> Dump(Family family, const std::string& table) = 0;
};

// The firewall error of a failed op: msg "nftables: <what>", the errno's
// reason (kNotFound for ENOENT, kAlreadyExists for EEXIST, kBusy for
// EBUSY, else kFailed), details strerror and the kernel's own message.
Status OpError(const std::string& what, int err, const std::string& kernel_msg = "");

}  // namespace weft::sys::nft
