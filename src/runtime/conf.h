#pragma once
// Network configuration loading as libcni and containerd's go-cni do it:
// conflist parsing with the spec 1.1 fields (cniVersions, disableCheck,
// disableGC, loadOnlyInlinedPlugins), drop-in plugin files in
// <confdir>/<network name>/*.conf, promotion of a single-plugin .conf/.json
// to a one-plugin list, and the choice of the default network in a conf dir.
//
// Everything here is pure file reading; no plugin is run.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace weft::runtime {

// One plugin entry of a network list: the object exactly as written.
struct PluginConf {
  std::string type;
  nlohmann::json raw;   // the plugin's own object (never has prevResult added)
  std::string source;   // the drop-in file it came from; empty when inline

  // The capabilities the plugin declares as true, sorted.
  std::vector<std::string> Capabilities() const;
};

struct NetworkConfigList {
  std::string name;
  std::string cni_version;     // the version the runtime will use
  std::string version_reason;  // how cni_version was chosen, for operators
  // Every version the config offers (cniVersions plus cniVersion) that is
  // not above kRuntimeMaxVersion, ascending; cni_version is the last one.
  std::vector<std::string> offered_versions;
  bool disable_check = false;
  bool disable_gc = false;
  bool load_only_inlined_plugins = false;
  std::vector<PluginConf> plugins;  // inline plugins first, then drop-ins
  std::string bytes;  // the list's JSON text: what libcni caches as "config"
  std::string file;   // where it was loaded from; empty for in-memory lists
};

// The highest version libcni (and we) implement; cniVersions entries above
// it are ignored.
inline constexpr std::string_view kRuntimeMaxVersion = "1.1.0";

// libcni's NetworkConfFromBytes: a list without drop-ins. A list with no
// "plugins" key is valid here (drop-ins may supply them) unless
// loadOnlyInlinedPlugins is set. Errors: malformed for bad JSON,
// invalid-argument for everything else.
Result<NetworkConfigList> ParseConfList(std::string_view bytes);

// One plugin object (a .conf/.json file or a drop-in). "type" is required.
Result<PluginConf> ParsePluginConf(std::string_view bytes);

// libcni's ConfListFromConf: a single plugin config becomes a one-plugin
// list named after the plugin's "name", at the plugin's "cniVersion".
Result<NetworkConfigList> PromoteConf(const PluginConf& conf);

// Loads a file the way go-cni does by extension: .conflist as a list (plus
// drop-ins unless loadOnlyInlinedPlugins), anything else as a single plugin
// that is promoted. A list that ends up with no plugins is an error.
Result<NetworkConfigList> LoadConfFile(const std::string& path);

// Regular files in `dir` whose extension is one of `extensions`, sorted
// lexically, as full paths. A missing dir is an empty list (libcni).
Result<std::vector<std::string>> ConfFiles(const std::string& dir, const std::vector<std::string>& extensions);

struct LoadOptions {
  std::string conf_dir = "/etc/cni/net.d";
  int max_networks = 1;               // <= 0: no limit (go-cni WithAllConf)
  std::string ifname_prefix = "eth";  // network i gets <prefix><i>
};

struct LoadedNetwork {
  NetworkConfigList list;
  std::string ifname;
};

struct SkippedFile {
  std::string file;
  Status reason;
};

// What one scan of a conf dir found. networks[0] is the default network.
struct LoadReport {
  LoadOptions options;
  std::vector<std::string> candidates;  // every .conf/.conflist/.json, sorted
  std::vector<LoadedNetwork> networks;
  std::vector<SkippedFile> skipped;     // invalid files, with the reason
  std::vector<std::string> not_read;    // valid-looking files after the max
  // OK when at least one network loaded; else why not. This is what
  // `crictl info` calls lastCNILoadStatus.
  Status status;
  // What containerd's go-cni loader itself returns for this dir: it stops at
  // the first invalid file that sorts before the max-th valid one and
  // refuses the whole load. OK when containerd would load fine.
  Status containerd_status;
};

// Scans the conf dir: sorted lexically, invalid files skipped with their
// reason, the first max_networks valid ones loaded.
LoadReport LoadConfDir(const LoadOptions& options);

// cnitool's lookup by name (libcni LoadConfList): .conflist files first,
// then .conf/.json promoted. Invalid-argument when there is no such network,
// naming the dir and every file that did not load. Unlike libcni, a broken
// file that sorts before the match does not hide the match.
Result<NetworkConfigList> FindNetwork(const std::string& dir, const std::string& name);

// The loopback network containerd adds to every pod (go-cni WithLoNetwork),
// attached as ifname "lo".
NetworkConfigList LoopbackNetwork();

}  // namespace weft::runtime
