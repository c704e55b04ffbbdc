#pragma once
// The agent's own reasons for its retry-or-fail decisions, as flannel's
// errTryAgain: the step that fails says whether trying again can help, and
// the retry loops (registration, lease renewal) read only that — never a
// Status's reason or message. They stay inside src/agent; what weftd prints
// is the Status.

#include <utility>
#include <variant>

#include "base/status.h"

namespace weft::agent {

enum class Why {
  kTryAgain,   // transient: the control plane unreachable or failing, a lost race, a lease gone
  kBadConfig,  // the cluster's network config is missing or invalid: retrying cannot help
  kNoSubnet,   // no subnet for this node: the network is full, or its own was taken while its lease was lost
};
const char* WhyName(Why why);

// An error with the agent's reason for it.
struct Failure {
  Why why = Why::kTryAgain;
  Status status;
};

// One try of a retried step: a T, or a Failure. A plain error Status
// converts to a kTryAgain failure (so WEFT_ASSIGN_OR_RETURN on a lower
// layer's Result works and means "transient"); the reasons that end the
// loop are spelled out with Fail().
template <typename T>
class [[nodiscard]] Attempt {
 public:
  Attempt(T value) : v_(std::move(value)) {}                        // NOLINT: implicit by design
  Attempt(Status error) : v_(Failure{Why::kTryAgain, std::move(error)}) {}  // NOLINT
  Attempt(Failure failure) : v_(std::move(failure)) {}              // NOLINT
  static Attempt Fail(Why why, Status error) { return Attempt(Failure{why, std::move(error)}); }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // Whether trying again may succeed. REQUIRES: !ok().
  bool retryable() const { return failure().why == Why::kTryAgain; }
  const Failure& failure() const { return std::get<Failure>(v_); }
  const Status& status() const { return failure().status; }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Failure> v_;
};

}  // namespace weft::agent
