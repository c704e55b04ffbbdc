#pragma once
// Owning handles for libnftnl's objects, shared by nft_codec.cc and
// nft_kernel.cc (internal to weft_nft: only its sources include libnftnl).

#include <libnftnl/chain.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>

#include <memory>

namespace weft::sys::nft {

template <auto Free>
struct NftnlDeleter {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};
using TablePtr = std::unique_ptr<nftnl_table, NftnlDeleter<nftnl_table_free>>;
using ChainPtr = std::unique_ptr<nftnl_chain, NftnlDeleter<nftnl_chain_free>>;
using RulePtr = std::unique_ptr<nftnl_rule, NftnlDeleter<nftnl_rule_free>>;
using SetPtr = std::unique_ptr<nftnl_set, NftnlDeleter<nftnl_set_free>>;
using ObjPtr = std::unique_ptr<nftnl_obj, NftnlDeleter<nftnl_obj_free>>;
using UdataPtr = std::unique_ptr<nftnl_udata_buf, NftnlDeleter<nftnl_udata_buf_free>>;

}  // namespace weft::sys::nft
