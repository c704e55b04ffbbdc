#include "ipam/store.h"

#include <algorithm>
#include <cstdlib>

#include "sys/files.h"

namespace weft::ipam {

namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"SQL(
CREATE TABLE IF NOT EXISTS ipam_ranges (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  subnet TEXT NOT NULL UNIQUE,
  description TEXT,
  next_offset INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS pods (
  container_id TEXT NOT NULL,
  ifname TEXT NOT NULL,
  network TEXT NOT NULL,
  name TEXT,
  namespace TEXT,
  uid TEXT,
  netns TEXT NOT NULL,
  ip_address_v4 TEXT,
  prefix_v4 INTEGER,
  range_v4 INTEGER REFERENCES ipam_ranges(id),
  offset_v4 INTEGER,
  ip_address_v6 TEXT,
  prefix_v6 INTEGER,
  range_v6 INTEGER REFERENCES ipam_ranges(id),
  offset_v6 INTEGER,
  ip_gateway_v4 TEXT,
  ip_gateway_v6 TEXT,
  interface_name TEXT NOT NULL,
  interface_mtu INTEGER,
  state TEXT NOT NULL DEFAULT 'adding',
  creation_timestamp DATETIME DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (container_id, ifname),
  UNIQUE (ip_address_v4),
  UNIQUE (ip_address_v6),
  UNIQUE (range_v4, offset_v4),
  UNIQUE (range_v6, offset_v6)
);
CREATE INDEX IF NOT EXISTS pods_network ON pods(network);
CREATE TABLE IF NOT EXISTS portmap_entries (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  container_id TEXT NOT NULL,
  ifname TEXT NOT NULL,
  host_ip TEXT NOT NULL,
  host_port INTEGER NOT NULL,
  protocol TEXT NOT NULL,
  container_ip TEXT NOT NULL,
  container_port INTEGER NOT NULL,
  FOREIGN KEY (container_id, ifname) REFERENCES pods(container_id, ifname) ON DELETE CASCADE,
  UNIQUE (host_ip, host_port, protocol)
);
CREATE INDEX IF NOT EXISTS portmap_owner ON portmap_entries(container_id, ifname);
)SQL";

constexpr const char* kPodColumns =
    "container_id, ifname, network, name, namespace, uid, netns, ip_address_v4, prefix_v4, "
    "ip_address_v6, prefix_v6, ip_gateway_v4, ip_gateway_v6, interface_name, interface_mtu, state, "
    "creation_timestamp";

PodRecord ReadPod(const Stmt& s) {
  PodRecord p;
  p.container_id = s.Text(0);
  p.ifname = s.Text(1);
  p.network = s.Text(2);
  p.pod_name = s.Text(3);
  p.pod_namespace = s.Text(4);
  p.pod_uid = s.Text(5);
  p.netns = s.Text(6);
  if (!s.IsNull(7))
    if (auto a = IpAddress::Parse(s.Text(7))) p.ip_v4 = IpPrefix(*a, static_cast<int>(s.Int(8)));
  if (!s.IsNull(9))
    if (auto a = IpAddress::Parse(s.Text(9))) p.ip_v6 = IpPrefix(*a, static_cast<int>(s.Int(10)));
  if (!s.IsNull(11)) p.gateway_v4 = IpAddress::Parse(s.Text(11));
  if (!s.IsNull(12)) p.gateway_v6 = IpAddress::Parse(s.Text(12));
  p.host_ifname = s.Text(13);
  p.mtu = static_cast<int>(s.Int(14));
  p.state = s.Text(15);
  p.created = s.Text(16);
  return p;
}

struct Allocated {
  int64_t range_id;
  int64_t offset;
  IpPrefix address;
};

// Finds the first free offset in [from, to] of range `rid`, skipping
// `excluded`. Walks the UNIQUE(range, offset) index: cost is the length of
// the allocated run after `from`, never the size of the range.
Result<std::optional<int64_t>> FirstFree(Db& db, const std::string& fam, int64_t rid, int64_t from,
                                         int64_t to, const std::vector<int64_t>& excluded) {
  std::string probe_sql = "SELECT 1 FROM pods WHERE range_" + fam + "=?1 AND offset_" + fam + "=?2";
  std::string gap_sql = "SELECT p.offset_" + fam + " + 1 FROM pods p WHERE p.range_" + fam +
                        "=?1 AND p.offset_" + fam + " >= ?2 AND p.offset_" + fam +
                        " < ?3 AND NOT EXISTS (SELECT 1 FROM pods q WHERE q.range_" + fam +
                        "=?1 AND q.offset_" + fam + " = p.offset_" + fam + " + 1) ORDER BY p.offset_" +
                        fam + " LIMIT 1";
  WEFT_ASSIGN_OR_RETURN(Stmt probe, Stmt::Prepare(db, probe_sql.c_str()));
  std::optional<Stmt> gap;
  int64_t c = from;
  while (c <= to) {
    if (std::find(excluded.begin(), excluded.end(), c) != excluded.end()) {
      ++c;
      continue;
    }
    (void)probe.Reset();
    probe.Bind(1, rid).Bind(2, c);
    WEFT_ASSIGN_OR_RETURN(bool taken, probe.Step());
    if (!taken) return std::optional<int64_t>(c);
    if (!gap) {
      WEFT_ASSIGN_OR_RETURN(Stmt g, Stmt::Prepare(db, gap_sql.c_str()));
      gap.emplace(std::move(g));
    }
    (void)gap->Reset();
    gap->Bind(1, rid).Bind(2, c).Bind(3, to);
    WEFT_ASSIGN_OR_RETURN(bool found, gap->Step());
    if (!found) break;
    c = gap->Int(0);
  }
  return std::optional<int64_t>();
}

Result<int64_t> EnsureRange(Db& db, const IpPrefix& range, int64_t* next_offset) {
  std::string subnet = range.Masked().ToString();
  WEFT_ASSIGN_OR_RETURN(Stmt sel, Stmt::Prepare(db, "SELECT id, next_offset FROM ipam_ranges WHERE subnet=?1"));
  sel.Bind(1, subnet);
  WEFT_ASSIGN_OR_RETURN(bool found, sel.Step());
  if (found) {
    *next_offset = sel.Int(1);
    return sel.Int(0);
  }
  WEFT_ASSIGN_OR_RETURN(Stmt ins, Stmt::Prepare(db, "INSERT INTO ipam_ranges(subnet) VALUES(?1)"));
  ins.Bind(1, subnet);
  WEFT_RETURN_IF_ERROR(ins.Run());
  *next_offset = 0;
  return static_cast<int64_t>(db.LastInsertId());
}

}  // namespace

OffsetSpan UsableOffsets(const IpPrefix& range) {
  int hb = range.host_bits();
  if (range.is_v4()) {
    if (hb == 0) return {0, 0};
    if (hb == 1) return {0, 1};
    return {1, (int64_t{1} << hb) - 2};
  }
  if (hb == 0) return {0, 0};
  int64_t size_m1 = hb >= 62 ? (int64_t{1} << 62) : (int64_t{1} << hb) - 1;
  return {1, size_m1};
}

Result<Store> Store::Open(const std::string& data_dir, int busy_timeout_ms) {
  if (!sys::PathExists(data_dir)) {
    Status st = sys::MkdirAll(data_dir, 0700);
    if (!st.ok()) return st.Prefix("create dataDir");
  }
  const std::string path = data_dir + "/ipam.db";
  {
    WEFT_ASSIGN_OR_RETURN(Db db, Db::Open(path, busy_timeout_ms));
    Store store(std::move(db));
    WEFT_ASSIGN_OR_RETURN(bool ready, store.Initialized());
    if (ready) return store;  // the hot path: two pragma reads
  }
  // First use of this dataDir (or an older schema): initialise once, with
  // every other process waiting on the lock. Switching to WAL takes an
  // exclusive lock for which SQLite does not run the busy handler, and a
  // connection opened before the switch must not be reused.
  WEFT_ASSIGN_OR_RETURN(auto lock, sys::FileLock::Acquire(data_dir + "/ipam.lock"));
  WEFT_ASSIGN_OR_RETURN(Db db, Db::Open(path, busy_timeout_ms));
  Store store(std::move(db));
  WEFT_RETURN_IF_ERROR(store.EnsureSchema());
  return store;
}

Result<bool> Store::Initialized() {
  WEFT_ASSIGN_OR_RETURN(std::string mode, db_.QueryText("PRAGMA journal_mode"));
  WEFT_ASSIGN_OR_RETURN(std::string version, db_.QueryText("PRAGMA user_version"));
  return mode == "wal" && version == std::to_string(kSchemaVersion);
}

Status Store::EnsureSchema() {
  WEFT_ASSIGN_OR_RETURN(std::string mode, db_.QueryText("PRAGMA journal_mode"));
  if (mode != "wal") WEFT_RETURN_IF_ERROR(db_.Exec("PRAGMA journal_mode=WAL"));
  WEFT_ASSIGN_OR_RETURN(std::string v, db_.QueryText("PRAGMA user_version"));
  int64_t version = std::atoll(v.c_str());
  if (version == kSchemaVersion) return Status::Ok();
  if (version > kSchemaVersion)
    return Status::Error(Reason::kFailed, Domain::kStore, "IPAM database " + db_.path() + " has schema version " +
                                           std::to_string(version) + ", newer than this weft (" +
                                           std::to_string(kSchemaVersion) + ")");
  WEFT_ASSIGN_OR_RETURN(Txn txn, Txn::Begin(db_));
  WEFT_RETURN_IF_ERROR(db_.Exec(kSchema));
  WEFT_RETURN_IF_ERROR(db_.Exec("PRAGMA user_version=" + std::to_string(kSchemaVersion)));
  return txn.Commit();
}

namespace {

Status InsertPod(Db& db, const PodRecord& p, const std::optional<Allocated>& v4,
                 const std::optional<Allocated>& v6) {
  WEFT_ASSIGN_OR_RETURN(
      Stmt ins,
      Stmt::Prepare(db,
                    "INSERT INTO pods(container_id, ifname, network, name, namespace, uid, netns, "
                    "ip_address_v4, prefix_v4, range_v4, offset_v4, ip_address_v6, prefix_v6, range_v6, "
                    "offset_v6, ip_gateway_v4, ip_gateway_v6, interface_name, interface_mtu, state) "
                    "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20)"));
  ins.Bind(1, p.container_id).Bind(2, p.ifname).Bind(3, p.network).Bind(4, p.pod_name);
  ins.Bind(5, p.pod_namespace).Bind(6, p.pod_uid).Bind(7, p.netns);
  auto bind_family = [&](int col, const std::optional<IpPrefix>& ip, const std::optional<Allocated>& a) {
    if (ip) {
      ins.Bind(col, ip->addr().ToString()).Bind(col + 1, int64_t{ip->len()});
    } else {
      ins.BindNull(col).BindNull(col + 1);
    }
    if (a) {
      ins.Bind(col + 2, a->range_id).Bind(col + 3, a->offset);
    } else {
      ins.BindNull(col + 2).BindNull(col + 3);
    }
  };
  bind_family(8, p.ip_v4, v4);
  bind_family(12, p.ip_v6, v6);
  if (p.gateway_v4) ins.Bind(16, p.gateway_v4->ToString()); else ins.BindNull(16);
  if (p.gateway_v6) ins.Bind(17, p.gateway_v6->ToString()); else ins.BindNull(17);
  ins.Bind(18, p.host_ifname).Bind(19, int64_t{p.mtu}).Bind(20, p.state);
  Status st = ins.Run();
  if (IsConstraintViolation(st)) {
    if (st.details().find("pods.container_id") != std::string::npos)
      return Status::Error(Reason::kAlreadyExists, Domain::kStore,
                           "container " + p.container_id + " already has an attachment on " + p.ifname,
                           "run DEL for it first");
    return Status::Error(Reason::kFailed, Domain::kStore, "address already in use", st.details());
  }
  return st;
}

}  // namespace

Result<PodRecord> Store::Reserve(PodRecord pod, const AllocationRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Txn txn, Txn::Begin(db_));
  {
    WEFT_ASSIGN_OR_RETURN(Stmt dup, Stmt::Prepare(db_, "SELECT 1 FROM pods WHERE container_id=?1 AND ifname=?2"));
    dup.Bind(1, pod.container_id).Bind(2, pod.ifname);
    WEFT_ASSIGN_OR_RETURN(bool exists, dup.Step());
    if (exists)
      return Status::Error(Reason::kAlreadyExists, Domain::kStore,
                           "container " + pod.container_id + " already has an attachment on " + pod.ifname,
                           "run DEL for it first");
  }
  std::optional<Allocated> got[2];
  for (int fam = 0; fam < 2; ++fam) {
    bool want_v6 = fam == 1;
    bool any = false;
    std::string tried;
    for (const IpPrefix& range : req.ranges) {
      if (range.is_v4() == want_v6) continue;
      any = true;
      IpPrefix net = range.Masked();
      int64_t cursor = 0;
      WEFT_ASSIGN_OR_RETURN(int64_t rid, EnsureRange(db_, net, &cursor));
      OffsetSpan span = UsableOffsets(net);
      std::vector<int64_t> excluded;
      for (const auto& e : req.exclude)
        if (net.Contains(e))
          if (auto off = e.OffsetFrom(net.addr())) excluded.push_back(static_cast<int64_t>(*off));
      cursor = std::clamp(cursor, span.lo, std::max(span.lo, span.hi));
      std::string fs = want_v6 ? "v6" : "v4";
      WEFT_ASSIGN_OR_RETURN(auto off, FirstFree(db_, fs, rid, cursor, span.hi, excluded));
      if (!off && cursor > span.lo) {
        WEFT_ASSIGN_OR_RETURN(off, FirstFree(db_, fs, rid, span.lo, cursor - 1, excluded));
      }
      tried += (tried.empty() ? "" : ", ") + net.ToString();
      if (!off) continue;
      got[fam] = Allocated{rid, *off, IpPrefix(net.addr().Plus(static_cast<uint64_t>(*off)), net.len())};
      WEFT_ASSIGN_OR_RETURN(Stmt upd, Stmt::Prepare(db_, "UPDATE ipam_ranges SET next_offset=?1 WHERE id=?2"));
      upd.Bind(1, *off + 1).Bind(2, rid);
      WEFT_RETURN_IF_ERROR(upd.Run());
      break;
    }
    if (any && !got[fam])
      return Status::Error(Reason::kExhausted, Domain::kStore,
                           std::string("no free IPv") + (want_v6 ? "6" : "4") + " address in " + tried,
                           "every usable address is allocated; release pods or add a range to \"ranges\"");
  }
  if (got[0]) pod.ip_v4 = got[0]->address;
  if (got[1]) pod.ip_v6 = got[1]->address;
  pod.state = kStateAdding;
  WEFT_RETURN_IF_ERROR(InsertPod(db_, pod, got[0], got[1]));
  WEFT_RETURN_IF_ERROR(txn.Commit());
  return pod;
}

Status Store::Insert(const PodRecord& pod) {
  WEFT_ASSIGN_OR_RETURN(Txn txn, Txn::Begin(db_));
  WEFT_RETURN_IF_ERROR(InsertPod(db_, pod, std::nullopt, std::nullopt));
  return txn.Commit();
}

Status Store::SetState(const std::string& cid, const std::string& ifname, const std::string& state) {
  WEFT_ASSIGN_OR_RETURN(Stmt s, Stmt::Prepare(db_, "UPDATE pods SET state=?1 WHERE container_id=?2 AND ifname=?3"));
  s.Bind(1, state).Bind(2, cid).Bind(3, ifname);
  return s.Run();
}

Result<std::optional<PodRecord>> Store::Find(const std::string& cid, const std::string& ifname) {
  std::string sql = std::string("SELECT ") + kPodColumns + " FROM pods WHERE container_id=?1 AND ifname=?2";
  WEFT_ASSIGN_OR_RETURN(Stmt s, Stmt::Prepare(db_, sql.c_str()));
  s.Bind(1, cid).Bind(2, ifname);
  WEFT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<PodRecord>();
  return std::optional<PodRecord>(ReadPod(s));
}

Result<std::vector<PodRecord>> Store::ListPods(const std::string& network) {
  std::string sql = std::string("SELECT ") + kPodColumns + " FROM pods" +
                    (network.empty() ? "" : " WHERE network=?1") + " ORDER BY creation_timestamp, container_id";
  WEFT_ASSIGN_OR_RETURN(Stmt s, Stmt::Prepare(db_, sql.c_str()));
  if (!network.empty()) s.Bind(1, network);
  std::vector<PodRecord> out;
  while (true) {
    WEFT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadPod(s));
  }
  return out;
}

Status Store::Release(const std::string& cid, const std::string& ifname, bool* existed) {
  WEFT_ASSIGN_OR_RETURN(Stmt s, Stmt::Prepare(db_, "DELETE FROM pods WHERE container_id=?1 AND ifname=?2"));
  s.Bind(1, cid).Bind(2, ifname);
  WEFT_RETURN_IF_ERROR(s.Run());
  if (existed) *existed = db_.Changes() > 0;
  return Status::Ok();
}

Status Store::BeginDelete(const std::string& cid, const std::string& ifname) {
  WEFT_ASSIGN_OR_RETURN(Stmt upd, Stmt::Prepare(db_, "UPDATE pods SET state=?1 WHERE container_id=?2 AND ifname=?3"));
  upd.Bind(1, std::string(kStateDeleting)).Bind(2, cid).Bind(3, ifname);
  return upd.Run();
}

Status Store::AddPortMappings(const std::string& cid, const std::string& ifname,
                              const std::vector<PortMapping>& maps) {
  if (maps.empty()) return Status::Ok();
  WEFT_ASSIGN_OR_RETURN(Txn txn, Txn::Begin(db_));
  WEFT_ASSIGN_OR_RETURN(Stmt owner, Stmt::Prepare(db_,
      "SELECT p.container_id, p.ifname, p.namespace, p.name FROM portmap_entries e JOIN pods p "
      "ON p.container_id=e.container_id AND p.ifname=e.ifname WHERE e.host_port=?1 AND e.protocol=?2 "
      "AND (e.host_ip=?3 OR e.host_ip='' OR ?3='') LIMIT 1"));
  WEFT_ASSIGN_OR_RETURN(Stmt ins, Stmt::Prepare(db_,
      "INSERT INTO portmap_entries(container_id, ifname, host_ip, host_port, protocol, container_ip, "
      "container_port) VALUES(?1,?2,?3,?4,?5,?6,?7)"));
  for (const auto& m : maps) {
    // An unspecified host IP clashes with every specific one and vice versa;
    // UNIQUE alone cannot express that, so look first inside the transaction.
    (void)owner.Reset();
    owner.Bind(1, int64_t{m.host_port}).Bind(2, m.protocol).Bind(3, m.host_ip);
    WEFT_ASSIGN_OR_RETURN(bool clash, owner.Step());
    if (clash) {
      std::string who = owner.Text(0) + "/" + owner.Text(1);
      if (!owner.Text(2).empty() || !owner.Text(3).empty())
        who += " (pod " + owner.Text(2) + "/" + owner.Text(3) + ")";
      return Status::Error(Reason::kConflict, Domain::kStore,
                           "hostPort " + std::to_string(m.host_port) + "/" + m.protocol +
                               (m.host_ip.empty() ? "" : " on " + m.host_ip) + " is already used by " + who);
    }
    (void)ins.Reset();
    ins.Bind(1, cid).Bind(2, ifname).Bind(3, m.host_ip).Bind(4, int64_t{m.host_port}).Bind(5, m.protocol);
    ins.Bind(6, m.container_ip).Bind(7, int64_t{m.container_port});
    WEFT_RETURN_IF_ERROR(ins.Run());
  }
  return txn.Commit();
}

Result<std::vector<PortMapping>> Store::ListPortMappings() {
  WEFT_ASSIGN_OR_RETURN(Stmt s, Stmt::Prepare(db_,
      "SELECT host_ip, host_port, protocol, container_ip, container_port, container_id, ifname "
      "FROM portmap_entries ORDER BY protocol, host_port, host_ip"));
  std::vector<PortMapping> out;
  while (true) {
    WEFT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    PortMapping m;
    m.host_ip = s.Text(0);
    m.host_port = static_cast<int>(s.Int(1));
    m.protocol = s.Text(2);
    m.container_ip = s.Text(3);
    m.container_port = static_cast<int>(s.Int(4));
    m.container_id = s.Text(5);
    m.ifname = s.Text(6);
    out.push_back(m);
  }
  return out;
}

Result<std::vector<PortMapping>> Store::PortMappingsOf(const std::string& cid, const std::string& ifname) {
  WEFT_ASSIGN_OR_RETURN(Stmt s, Stmt::Prepare(db_,
      "SELECT host_ip, host_port, protocol, container_ip, container_port FROM portmap_entries "
      "WHERE container_id=?1 AND ifname=?2 ORDER BY protocol, host_port, host_ip"));
  s.Bind(1, cid).Bind(2, ifname);
  std::vector<PortMapping> out;
  while (true) {
    WEFT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Text(0), static_cast<int>(s.Int(1)), s.Text(2), s.Text(3), static_cast<int>(s.Int(4)), cid,
                   ifname});
  }
  return out;
}

Result<bool> Store::HasLivePortMappings() {
  WEFT_ASSIGN_OR_RETURN(Stmt s, Stmt::Prepare(db_,
      "SELECT 1 FROM portmap_entries e JOIN pods p ON p.container_id=e.container_id AND p.ifname=e.ifname "
      "WHERE p.state != ?1 LIMIT 1"));
  s.Bind(1, std::string(kStateDeleting));
  return s.Step();
}

Status Store::CheckWritable() {
  // An empty write transaction does not touch the file; make the probe write
  // like a real one would (and roll it back).
  WEFT_ASSIGN_OR_RETURN(Txn txn, Txn::Begin(db_));
  return db_.Exec("UPDATE ipam_ranges SET next_offset=next_offset WHERE id=(SELECT min(id) FROM ipam_ranges)");
}

Result<std::vector<RangeUsage>> Store::Usage(const std::vector<IpPrefix>& ranges) {
  std::vector<RangeUsage> out;
  for (const auto& r : ranges) {
    IpPrefix net = r.Masked();
    std::string fam = net.is_v4() ? "v4" : "v6";
    std::string sql = "SELECT count(*) FROM pods p JOIN ipam_ranges r ON p.range_" + fam +
                      " = r.id WHERE r.subnet=?1";
    WEFT_ASSIGN_OR_RETURN(Stmt s, Stmt::Prepare(db_, sql.c_str()));
    s.Bind(1, net.ToString());
    WEFT_ASSIGN_OR_RETURN(bool row, s.Step());
    OffsetSpan span = UsableOffsets(net);
    RangeUsage u{net, span.hi >= span.lo ? static_cast<uint64_t>(span.hi - span.lo + 1) : 0,
                 row ? static_cast<uint64_t>(s.Int(0)) : 0};
    out.push_back(u);
  }
  return out;
}

}  // namespace weft::ipam
