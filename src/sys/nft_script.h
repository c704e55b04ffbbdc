#pragma once
// nftables scripts applied in-process through libnftables (Debian
// libnftables1): the same text `nft -f` reads, parsed, evaluated and sent
// as one nfnetlink batch — one kernel transaction, all or nothing — without
// starting a process. weftd's NetworkPolicy controller applies every change
// of table inet weft-netpol this way: exec'ing nft from weftd cost a fork of
// a 50 MB process and nft's start-up per event (docs/performance.md).
//
// A library of its own in the sys layer (weft_nft_script), as weft_http is:
// the CNI plugin links weft_sys and must not load libnftables.

#include <string>

#include "base/status.h"

namespace weft::sys {

// Runs `script` (nft's syntax, several commands) in the calling thread's
// network namespace as one transaction. A parse, evaluation or kernel error
// leaves the kernel as it was and comes back as a firewall error whose
// details are nft's own message (the offending line and the reason), as
// `nft -f` prints it. Thread-safe: calls in one process take turns (one
// libnftables context at a time, each call its own).
Status NftRunScript(const std::string& script);

}  // namespace weft::sys
