#pragma once
// An nft::Backend held in memory, for unit tests without root (as
// knftables' fake): it records every committed transaction and holds the
// tables they leave, and applies the kernel's semantics for what Weft uses
// — all or nothing, and the same errno for the same mistake:
//   ENOENT  a missing table, chain, set, element or counter (delete, flush,
//           a rule in a missing chain, a jump to one, a lookup of a missing
//           set, an element of one); destroy of a missing one is no error
//   EEXIST  create of an existing object; add of a chain or set that exists
//           with another hook or type (a chain's policy is updated)
//   EBUSY   delete of a chain a rule or verdict map jumps to, of a set a
//           rule looks up, of a counter a rule names; an element added
//           again with other data
//   EINVAL  a key or data of the wrong length for its set, data in a plain
//           set or none in a map, a timeout in a set without the flag
//   EOPNOTSUPP a jump or goto to a base chain; a dynset (`update @s`) on a
//           set without NFT_SET_EVAL, or with a timeout on one without
//           NFT_SET_TIMEOUT
// Not modelled: overlapping ranges (the kernel's ENOTEMPTY), element
// expiry, counters that count.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sys/nft_types.h"

namespace weft::sys::nft {

class Fake : public Backend {
 public:
  Status Apply(const Transaction& tx) override;
  Result<TableState> Dump(Family family, const std::string& table) override;

  // Every transaction that committed, in order (a failed one is not kept).
  const std::vector<Transaction>& committed() const { return committed_; }
  // How many Apply calls failed.
  int failed() const { return failed_; }

 private:
  std::map<std::pair<Family, std::string>, TableState> tables_;
  std::map<std::pair<Family, std::string>, uint64_t> handles_;
  std::vector<Transaction> committed_;
  int failed_ = 0;
};

}  // namespace weft::sys::nft
