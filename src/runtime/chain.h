#pragma once
// Driving a network list through its plugins with libcni's semantics:
//   ADD    in order, each plugin after the first gets the previous result as
//          prevResult; the final result is cached. No rollback (the runtime
//          calls DEL, as containerd does).
//   DEL    in reverse order with the cached result as prevResult (lists at
//          0.4.0 and up). Unlike libcni, which stops at the first failing
//          plugin, every plugin runs and the errors are joined; the cache
//          entry is removed only when all of them succeeded, so a retry
//          still has the prevResult.
//   CHECK  in order with the cached result, for lists at 0.4.0 and up;
//          nothing when disableCheck.
//   STATUS each plugin in order for lists at 1.1.0 and up (stops at the
//          first error); nothing below 1.1.0.
//   GC     a DEL for every cached attachment of the network that is not in
//          the valid set, then GC to every plugin of lists at 1.1.0 and up
//          with cni.dev/valid-attachments; nothing at all when disableGC.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cni/netconf.h"
#include "cni/result.h"
#include "runtime/cache.h"
#include "runtime/conf.h"
#include "runtime/invoke.h"

namespace weft::runtime {

struct RuntimeOptions {
  InvokeOptions invoke;
  std::string cache_dir = kDefaultCacheDir;
  // Apply NegotiateVersion before every verb (opt-in; not libcni's rule).
  bool negotiate_versions = false;
};

struct AddResult {
  cni::CniResult result;
  nlohmann::json json;  // the final result as the last plugin printed it, version-fixed
};

// Thread-compatible: concurrent calls for different attachments are fine;
// for one attachment the caller serialises, as with libcni.
class Runtime {
 public:
  explicit Runtime(RuntimeOptions options)
      : invoker_(std::move(options.invoke)),
        cache_(std::move(options.cache_dir)),
        negotiate_(options.negotiate_versions) {}

  const Invoker& invoker() const { return invoker_; }
  const ResultCache& cache() const { return cache_; }

  Result<AddResult> AddNetworkList(const NetworkConfigList& list, const RuntimeConf& rt) const;
  Status CheckNetworkList(const NetworkConfigList& list, const RuntimeConf& rt) const;
  Status DelNetworkList(const NetworkConfigList& list, const RuntimeConf& rt) const;
  Status StatusNetworkList(const NetworkConfigList& list) const;
  // `valid` == nullopt sends no valid-attachments list, so every cached
  // attachment of the network is stale (cnitool's gc).
  Status GcNetworkList(const NetworkConfigList& list,
                       const std::optional<std::vector<cni::Attachment>>& valid) const;

  // Tears an attachment down from its cache entry alone: the network list,
  // CNI_ARGS and capability args are the cached ones (podman's path when the
  // network config is gone). `netns` overrides the cached netns; pass "" for
  // a namespace that no longer exists. Not found when not cached.
  Status DelFromCache(const std::string& network, const std::string& container_id, const std::string& ifname,
                      const std::optional<std::string>& netns) const;

  // Opt-in, beyond libcni (which always uses the config's highest
  // version): lowers list->cni_version to the highest offered version that
  // every plugin's VERSION answer includes, so a list offering
  // cniVersions ["1.0.0","1.1.0"] still works with plugins that stop at
  // 1.0.0. Unsupported, naming the plugin when no offered version
  // is supported by all. Returns the version chosen.
  Result<std::string> NegotiateVersion(NetworkConfigList* list) const;

  // libcni ValidateNetworkList: every plugin is found and says (VERSION) it
  // supports the list's version. Returns the declared capabilities.
  Result<std::vector<std::string>> ValidateNetworkList(const NetworkConfigList& list) const;

 private:
  Result<std::optional<nlohmann::json>> CachedPrevResult(const NetworkConfigList& list, const RuntimeConf& rt) const;
  // `list` as the verbs use it: negotiated when negotiate_ is set.
  Result<NetworkConfigList> Effective(const NetworkConfigList& list) const;

  Invoker invoker_;
  ResultCache cache_;
  bool negotiate_ = false;
};

// `type="bridge" name="x"` as libcni describes a plugin in errors.
std::string PluginDescription(const PluginConf& p);

}  // namespace weft::runtime
