#include "cni/errors.h"

#include <array>

namespace weft::cni {
namespace {

using R = Reason;
using D = Domain;
constexpr std::optional<Domain> kAny = std::nullopt;

// (reason, domain) -> CNI code. Specific domains before the catch-all row of
// the same reason. docs/errors.md ("Where each code comes from") mirrors it.
constexpr std::array kTable = {
    ErrorRow{R::kUnsupported, kAny, Code::kIncompatibleVersion},  // cniVersion, CHECK/STATUS/GC below their version
    ErrorRow{R::kNotFound, D::kExec, Code::kExec},                // a program not in CNI_PATH
    ErrorRow{R::kNotFound, kAny, Code::kUnknownContainer},        // CNI_NETNS does not exist; no cached attachment
    ErrorRow{R::kInvalidArgument, D::kEnvironment, Code::kInvalidEnv},  // CNI_* variables
    ErrorRow{R::kInvalidArgument, D::kNetns, Code::kInvalidEnv},        // CNI_NETNS is not a network namespace
    ErrorRow{R::kFailed, D::kNetns, Code::kInvalidEnv},                 // CNI_NETNS cannot be opened (EACCES...)
    ErrorRow{R::kInvalidArgument, kAny, Code::kInvalidConfig},          // a config key, a plugin name, a MAC
    ErrorRow{R::kMalformed, kAny, Code::kDecode},                       // JSON, a prevResult, a cache file
    ErrorRow{R::kBusy, kAny, Code::kTryAgainLater},                     // the IPAM database stayed locked
    ErrorRow{R::kUnavailable, D::kControlPlane, Code::kControlPlane},   // API server, etcd, weftd
    ErrorRow{R::kFailed, D::kControlPlane, Code::kControlPlane},
    ErrorRow{R::kUnavailable, kAny, Code::kNotAvailable},               // STATUS: the store or a range
    ErrorRow{R::kExhausted, kAny, Code::kNoFreeAddress},                // a range has no free address
    ErrorRow{R::kAlreadyExists, D::kStore, Code::kAlreadyAttached},     // container+ifname has a row
    ErrorRow{R::kConflict, D::kStore, Code::kHostPortConflict},         // a host port held by another pod
    ErrorRow{R::kAlreadyExists, kAny, Code::kNameTaken},                // a link name, a route, a second attachment
    ErrorRow{R::kConflict, kAny, Code::kNameTaken},                     // a name held by a link of another kind
    ErrorRow{R::kFailed, D::kStore, Code::kStore},                      // SQLite: read-only, full, corrupted
    ErrorRow{R::kFailed, D::kKernel, Code::kKernel},                    // netlink, syscalls
    ErrorRow{R::kFailed, D::kFirewall, Code::kFirewall},                // nft, iptables-restore
    ErrorRow{R::kFailed, D::kPlugin, Code::kDelegatedIpam},             // the delegated IPAM plugin
    ErrorRow{R::kMismatch, kAny, Code::kCheckFailed},                   // CHECK found a difference
    ErrorRow{R::kFailed, D::kExec, Code::kExec},                        // a program could not run, or failed
    ErrorRow{R::kFailed, kAny, Code::kIo},                              // files and directories
    ErrorRow{R::kInternal, kAny, Code::kInternal},                      // a bug
};

}  // namespace

std::span<const ErrorRow> ErrorTable() { return kTable; }

Code CodeOf(const Status& st) {
  if (st.ok()) return Code::kOk;
  if (st.reported_code() != 0) return static_cast<Code>(st.reported_code());
  for (const ErrorRow& row : kTable)
    if (row.reason == st.reason() && (!row.domain || *row.domain == st.domain())) return row.code;
  return Code::kInternal;
}

bool IsIncompatibleVersion(int code) { return code == static_cast<int>(Code::kIncompatibleVersion); }

}  // namespace weft::cni
