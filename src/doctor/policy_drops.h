#pragma once
// `weftctl policy drops [--follow] [--since SEQ]` (docs/networkpolicy.md,
// "Drop records"): the packets NetworkPolicy and the source guard dropped on
// this node, one logfmt record per flow, as weftd keeps them (GET /drops).

#include <cstdint>
#include <string>

#include "runtime/ctl.h"

namespace CLI {
class App;
}

namespace weft::doctor {

// The largest `seq=` of the records in `body` (weftd's /drops answer), or
// `after` when none is larger: where --follow asks from next.
uint64_t LastDropSeq(const std::string& body, uint64_t after);

class PolicyDropsCommand {
 public:
  void Register(CLI::App& policy);
  bool parsed() const;
  int Run(runtime::ctl::Context& ctx);

 private:
  CLI::App* sub_ = nullptr;
  bool follow_ = false;
  uint64_t since_ = 0;
  double interval_s_ = 1.0;
  double for_s_ = 0;  // --follow: stop after this long (0 = until interrupted)
  std::string addr_;
  std::string token_file_;
};

}  // namespace weft::doctor
