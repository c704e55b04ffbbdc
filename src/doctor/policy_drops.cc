#include "doctor/policy_drops.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <ostream>
#include <sstream>
#include <thread>

#include "doctor/weftd.h"
#include "sys/http.h"

namespace weft::doctor {

uint64_t LastDropSeq(const std::string& body, uint64_t after) {
  uint64_t last = after;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    size_t at = line.find(" seq=");
    if (at == std::string::npos) continue;
    uint64_t v = std::strtoull(line.c_str() + at + 5, nullptr, 10);
    if (v > last) last = v;
  }
  return last;
}

void PolicyDropsCommand::Register(CLI::App& policy) {
  sub_ = policy.add_subcommand("drops",
                               "Show the packets NetworkPolicy and the source guard dropped on this node: one logfmt "
                               "record per flow (source and destination pod, port, protocol, direction, reason)");
  sub_->add_flag("--follow,-f", follow_, "Keep printing new records as weftd records them");
  sub_->add_option("--since", since_, "Only records after this seq")->capture_default_str();
  sub_->add_option("--interval", interval_s_, "--follow: seconds between two asks")
      ->check(CLI::Range(0.05, 60.0))
      ->capture_default_str();
  sub_->add_option("--for", for_s_, "--follow: stop after this many seconds (0: until interrupted)")
      ->check(CLI::Range(0.0, 86400.0));
  sub_->add_option("--weftd-addr", addr_, "weftd's metrics address (host:port)")->default_str(kDefaultWeftdAddr);
  sub_->add_option("--token-file", token_file_, kTokenFileHelp);
}

bool PolicyDropsCommand::parsed() const { return sub_ && sub_->parsed(); }

int PolicyDropsCommand::Run(runtime::ctl::Context& ctx) {
  auto fail = [&](const std::string& msg, const std::string& details = "") {
    *ctx.err << "weftctl policy drops: " << msg << "\n";
    if (!details.empty()) *ctx.err << "  details: " << details << "\n";
    return runtime::ctl::kExitFailed;
  };
  if (Status st = sys::InitHttp(); !st.ok()) return fail(st.msg(), st.details());
  Weftd weftd(addr_.empty() ? kDefaultWeftdAddr : addr_, std::chrono::seconds(10), token_file_);
  uint64_t after = since_;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    auto resp = weftd.Get("/drops?since=" + std::to_string(after));
    if (!resp.ok())
      return fail(Weftd::Explain(resp.status()),
                  resp.status().details());
    if (resp->status == 404)
      return fail("weftd at " + weftd.addr() +
                  " keeps no drop records (GET /drops: 404): it runs with --drop-log=false, or is older than this "
                  "weftctl");
    if (resp->status != 200)
      return fail("weftd at " + weftd.addr() + " answered GET /drops with HTTP " + std::to_string(resp->status),
                  resp->body.substr(0, 400));
    *ctx.out << resp->body << std::flush;
    after = LastDropSeq(resp->body, after);
    if (!follow_) return runtime::ctl::kExitOk;
    if (for_s_ > 0 && std::chrono::steady_clock::now() - start >= std::chrono::duration<double>(for_s_))
      return runtime::ctl::kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s_));
  }
}

}  // namespace weft::doctor
