#include "etcd/etcd_fake.h"

#include <algorithm>
#include <chrono>

namespace weft::etcd {
namespace {

bool InRange(const std::string& k, const std::string& key, const std::string& range_end) {
  if (range_end.empty()) return k == key;
  if (range_end == std::string(1, '\0')) return k >= key;
  return k >= key && k < range_end;
}

Status Unavailable(const char* what) {
  return Status::Error(Reason::kUnavailable, Domain::kControlPlane, std::string("fake etcd: ") + what + " failed");
}

}  // namespace

class FakeEtcd::Client : public EtcdRegistry {
 public:
  explicit Client(FakeEtcd* e) : e_(e) {}
  Result<EtcdRange> Range(const std::string& key, const std::string& range_end, int64_t revision) override {
    return e_->DoRange(key, range_end, revision);
  }
  Result<bool> Txn(const EtcdTxn& txn) override { return e_->DoTxn(txn); }
  Result<int64_t> LeaseGrant(int64_t ttl) override { return e_->DoLeaseGrant(ttl); }
  Result<int64_t> LeaseKeepAlive(int64_t id) override { return e_->DoLeaseKeepAlive(id); }
  Status LeaseRevoke(int64_t id) override { return e_->DoLeaseRevoke(id); }
  Status Watch(const std::string& key, const std::string& range_end, int64_t start_revision,
               const std::function<bool(const EtcdWatchMessage&)>& on_msg, const std::atomic<bool>& stop) override {
    return e_->DoWatch(key, range_end, start_revision, on_msg, stop);
  }

 private:
  FakeEtcd* e_;
};

std::unique_ptr<EtcdRegistry> FakeEtcd::NewClient() { return std::make_unique<Client>(this); }

void FakeEtcd::PutLocked(const std::string& key, const std::string& value, int64_t lease, int64_t rev) {
  EtcdKv& kv = kvs_[key];
  if (kv.create_revision == 0) kv.create_revision = rev;
  kv.key = key;
  kv.value = value;
  kv.mod_revision = rev;
  kv.lease = lease;
  history_.push_back(Change{rev, EtcdEvent{false, kv}});
}

void FakeEtcd::DeleteLocked(const std::string& key, int64_t rev) {
  auto it = kvs_.find(key);
  if (it == kvs_.end()) return;
  EtcdKv gone;
  gone.key = key;
  gone.mod_revision = rev;
  history_.push_back(Change{rev, EtcdEvent{true, gone}});
  kvs_.erase(it);
}

void FakeEtcd::RevokeLocked(int64_t id) {
  if (leases_.erase(id) == 0) return;
  std::vector<std::string> keys;
  for (const auto& [k, kv] : kvs_)
    if (kv.lease == id) keys.push_back(k);
  if (keys.empty()) return;
  ++revision_;
  for (const auto& k : keys) DeleteLocked(k, revision_);
}

void FakeEtcd::Put(const std::string& key, const std::string& value, int64_t lease) {
  {
    std::lock_guard lock(mu_);
    PutLocked(key, value, lease, ++revision_);
  }
  cv_.notify_all();
}

void FakeEtcd::Delete(const std::string& key) {
  {
    std::lock_guard lock(mu_);
    if (kvs_.count(key)) DeleteLocked(key, ++revision_);
  }
  cv_.notify_all();
}

void FakeEtcd::ExpireLease(int64_t id) {
  {
    std::lock_guard lock(mu_);
    RevokeLocked(id);
  }
  cv_.notify_all();
}

void FakeEtcd::Compact(int64_t revision) {
  std::lock_guard lock(mu_);
  compacted_ = std::max(compacted_, revision);
  history_.erase(std::remove_if(history_.begin(), history_.end(),
                                [&](const Change& c) { return c.revision <= compacted_; }),
                 history_.end());
}

void FakeEtcd::FailNext(Op op, int n) {
  std::lock_guard lock(mu_);
  fail_next_[op] += n;
}

void FakeEtcd::SetBeforeTxn(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  before_txn_ = std::move(fn);
}

void FakeEtcd::SetWatchIdle(std::function<bool()> fn) {
  std::lock_guard lock(mu_);
  watch_idle_ = std::move(fn);
}

int64_t FakeEtcd::revision() const {
  std::lock_guard lock(mu_);
  return revision_;
}

std::optional<EtcdKv> FakeEtcd::Get(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = kvs_.find(key);
  if (it == kvs_.end()) return std::nullopt;
  return it->second;
}

std::vector<EtcdKv> FakeEtcd::List(const std::string& prefix) const {
  std::lock_guard lock(mu_);
  std::vector<EtcdKv> out;
  for (const auto& [k, kv] : kvs_)
    if (k.compare(0, prefix.size(), prefix) == 0) out.push_back(kv);
  return out;
}

bool FakeEtcd::LeaseAlive(int64_t id) const {
  std::lock_guard lock(mu_);
  return leases_.count(id) > 0;
}

int FakeEtcd::Requests(Op op) const {
  std::lock_guard lock(mu_);
  auto it = requests_.find(op);
  return it == requests_.end() ? 0 : it->second;
}

bool FakeEtcd::Fail(Op op) {
  requests_[op]++;
  auto it = fail_next_.find(op);
  if (it == fail_next_.end() || it->second == 0) return false;
  it->second--;
  return true;
}

Result<EtcdRange> FakeEtcd::DoRange(const std::string& key, const std::string& range_end, int64_t revision) {
  std::lock_guard lock(mu_);
  if (Fail(Op::kRange)) return Unavailable("range");
  if (revision != 0 && revision != revision_)
    return Status::Error(Reason::kUnsupported, Domain::kControlPlane, "fake etcd: ranges only at the current revision");
  EtcdRange r;
  r.revision = revision_;
  for (const auto& [k, kv] : kvs_)
    if (InRange(k, key, range_end)) r.kvs.push_back(kv);
  return r;
}

Result<bool> FakeEtcd::DoTxn(const EtcdTxn& txn) {
  std::function<void()> before;
  {
    std::lock_guard lock(mu_);
    before = before_txn_;
  }
  if (before) before();
  bool applied = false;
  {
    std::lock_guard lock(mu_);
    if (Fail(Op::kTxn)) return Unavailable("txn");
    for (const EtcdCompare& c : txn.compare) {
      auto it = kvs_.find(c.key);
      int64_t have = it == kvs_.end() ? 0
                     : c.target == EtcdCompare::Target::kCreate ? it->second.create_revision
                                                                : it->second.mod_revision;
      if (have != c.revision) return false;
    }
    for (const EtcdOp& op : txn.success)
      if (op.kind == EtcdOp::Kind::kPut && op.lease != 0 && !leases_.count(op.lease))
        return Status::Error(Reason::kNotFound, Domain::kControlPlane, "etcdserver: requested lease not found");
    int64_t rev = revision_ + 1;
    for (const EtcdOp& op : txn.success) {
      if (op.kind == EtcdOp::Kind::kPut) {
        PutLocked(op.key, op.value, op.lease, rev);
        applied = true;
      } else if (kvs_.count(op.key)) {
        DeleteLocked(op.key, rev);
        applied = true;
      }
    }
    if (applied) revision_ = rev;
  }
  if (applied) cv_.notify_all();
  return true;
}

Result<int64_t> FakeEtcd::DoLeaseGrant(int64_t ttl) {
  std::lock_guard lock(mu_);
  if (Fail(Op::kLeaseGrant)) return Unavailable("lease grant");
  int64_t id = next_lease_++;
  leases_[id] = Lease{ttl};
  return id;
}

Result<int64_t> FakeEtcd::DoLeaseKeepAlive(int64_t id) {
  std::lock_guard lock(mu_);
  if (Fail(Op::kLeaseKeepAlive)) return Unavailable("lease keepalive");
  auto it = leases_.find(id);
  return it == leases_.end() ? 0 : it->second.ttl;
}

Status FakeEtcd::DoLeaseRevoke(int64_t id) {
  {
    std::lock_guard lock(mu_);
    if (Fail(Op::kLeaseRevoke)) return Unavailable("lease revoke");
    if (!leases_.count(id))
      return Status::Error(Reason::kNotFound, Domain::kControlPlane, "etcdserver: requested lease not found");
    RevokeLocked(id);
  }
  cv_.notify_all();
  return Status::Ok();
}

Status FakeEtcd::DoWatch(const std::string& key, const std::string& range_end, int64_t start_revision,
                         const std::function<bool(const EtcdWatchMessage&)>& on_msg, const std::atomic<bool>& stop) {
  std::unique_lock lock(mu_);
  bool broken = Fail(Op::kWatch);
  int64_t next = start_revision > 0 ? start_revision : revision_ + 1;  // the first revision to deliver
  EtcdWatchMessage created;
  created.created = true;
  created.revision = revision_;
  lock.unlock();
  if (!on_msg(created)) return Status::Ok();
  if (broken) return Unavailable("watch stream");
  lock.lock();
  if (start_revision > 0 && start_revision < compacted_) {
    EtcdWatchMessage m;
    m.canceled = true;
    m.compact_revision = compacted_;
    m.revision = revision_;
    m.cancel_reason = "mvcc: required revision has been compacted";
    lock.unlock();
    on_msg(m);
    return Status::Ok();
  }
  for (;;) {
    // Everything from `next` on, one message per revision.
    std::vector<EtcdWatchMessage> out;
    for (const Change& c : history_) {
      if (c.revision < next || !InRange(c.event.kv.key, key, range_end)) continue;
      if (out.empty() || out.back().revision != c.revision) {
        out.emplace_back();
        out.back().revision = c.revision;
      }
      out.back().events.push_back(c.event);
    }
    next = revision_ + 1;
    std::function<bool()> idle = watch_idle_;
    lock.unlock();
    for (const auto& m : out)
      if (!on_msg(m)) return Status::Ok();
    if (stop.load()) return Status::Ok();
    if (idle) {
      if (!idle()) return Status::Ok();
      lock.lock();
      continue;
    }
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return revision_ >= next || stop.load(); });
  }
}

}  // namespace weft::etcd
