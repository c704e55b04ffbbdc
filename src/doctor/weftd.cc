#include "doctor/weftd.h"

#include "base/strings.h"
#include "sys/files.h"

namespace weft::doctor {

Weftd::Weftd(std::string addr, std::chrono::milliseconds timeout, std::string token_file)
    : addr_(std::move(addr)),
      base_(addr_.find("://") == std::string::npos ? "http://" + addr_ : addr_),
      timeout_(timeout),
      token_file_(std::move(token_file)) {
  while (!base_.empty() && base_.back() == '/') base_.pop_back();
}

Result<sys::HttpResponse> Weftd::Get(const std::string& path) {
  sys::HttpRequest req;
  req.url = base_ + path;
  req.timeout = timeout_;
  if (!token_file_.empty()) {
    auto token = sys::ReadFile(token_file_, 64 * 1024);
    if (!token.ok()) return token.status().WithPrefix("--token-file");
    std::string t(Trim(*token));
    if (t.empty())
      return Status::Error(Reason::kInvalidArgument, Domain::kConfig, "--token-file " + token_file_ + " is empty");
    req.headers.push_back("Authorization: Bearer " + t);
  }
  auto r = http_.Do(req);
  if (!r.ok())
    return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                         "cannot reach weftd at " + addr_ + " (GET " + path + ")",
                         r.status().details());
  if (r->status == 401 || r->status == 403)
    return Status::Error(Reason::kFailed, Domain::kControlPlane,
                         "weftd at " + addr_ + " refused GET " + path + ": HTTP " + std::to_string(r->status) +
                             (r->status == 401 ? " (from off the node's loopback it needs --token-file with a token "
                                                 "allowed get on nodes/weft-status)"
                                               : " (the token's user may not get this node's nodes/weft-status)"),
                         std::string(Trim(r->body)));
  return r;
}

std::string Weftd::Explain(const Status& st) {
  if (st.reason() != Reason::kUnavailable) return st.msg();
  return st.msg() + ": is weftd running, and is --weftd-addr its --metrics-addr?";
}

}  // namespace weft::doctor
