#pragma once
// weftd's drop records (docs/networkpolicy.md, "Drop records"): a thread
// reads NFLOG group kDropLogGroup (sys/nflog.h), where the drop chains of
// table inet weft-netpol and the source guard's tables send what they drop
// (rate-limited per table by the kernel), and keeps one record per flow in
// a bounded ring (policy/drop_log.h), served as GET /drops and counted in
// /metrics.
//
// It never delays enforcement or allowed traffic: the kernel drops the
// packet whatever happens here, the log rule's limit caps what reaches this
// thread, and a full socket buffer makes the kernel drop log messages
// (counted as overruns), never packets. The thread resolves a new flow's
// pods under the NetworkPolicy engine's lock once per flow.

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "policy/drop_log.h"
#include "policy/netpol_controller.h"

namespace weft::agent {

class DropRecorder {
 public:
  // `netpol` (may be null: no pod names, no policies) must outlive it.
  explicit DropRecorder(policy::NetpolController* netpol, size_t capacity = 4096);
  ~DropRecorder();  // stops and joins the thread
  // Binds the group and starts the reader. A failure (another process has
  // the group, no permission) is logged and leaves the recorder down
  // (weft_drop_log_up 0); weftd goes on without records.
  void Start();
  // GET /drops?since=N: the records with seq > N, one logfmt line each.
  std::string Records(uint64_t since) const;
  std::string Metrics() const;

 private:
  void Loop();
  std::string SenderOf(uint32_t ifindex);
  policy::NetpolController* netpol_;
  policy::DropLog log_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> up_{false};
  std::atomic<uint64_t> overruns_{0};
  std::thread thread_;
};

}  // namespace weft::agent
