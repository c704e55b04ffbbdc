#include "doctor/weftd.h"

namespace weft::doctor {

Weftd::Weftd(std::string addr, std::chrono::milliseconds timeout)
    : addr_(std::move(addr)),
      base_(addr_.find("://") == std::string::npos ? "http://" + addr_ : addr_),
      timeout_(timeout) {
  while (!base_.empty() && base_.back() == '/') base_.pop_back();
}

Result<sys::HttpResponse> Weftd::Get(const std::string& path) {
  sys::HttpRequest req;
  req.url = base_ + path;
  req.timeout = timeout_;
  auto r = http_.Do(req);
  if (!r.ok())
    return Status::Error(Reason::kUnavailable, Domain::kControlPlane,
                         "cannot reach weftd at " + addr_ + " (GET " + path + ")",
                         r.status().details());
  return r;
}

}  // namespace weft::doctor
