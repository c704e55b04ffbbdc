#pragma once
// weftctl's machinery: a registry of subcommands over CLI11, the context
// they run in, and the exit codes scripts can rely on. Subcommands live in
// their own files (ctl_cni.cc for add/check/del/status/gc/conf); adding one
// (`doctor`, `state`) means writing a Command and registering it in
// cmd/weftctl/main.cc, nothing else.

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace CLI {
class App;
}

namespace weft::runtime::ctl {

// Exit codes (docs/weftctl.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;   // a plugin (or the runtime) reported an error
inline constexpr int kExitUsage = 2;    // bad flags, arguments, CNI_ARGS or CAP_ARGS
inline constexpr int kExitConfig = 3;   // no such network / no valid config
inline constexpr int kExitExec = 4;     // a plugin could not run: missing, crashed, timed out
inline constexpr int kExitDiscrepancies = 5;  // doctor: discrepancies found (or left after --fix)

// Options every subcommand shares; filled from flags, then the environment.
struct GlobalOptions {
  bool json = false;
  std::string conf_dir;     // --conf-dir, else NETCONFPATH, else /etc/cni/net.d
  std::string plugin_path;  // --cni-path, else CNI_PATH, else /opt/cni/bin
  std::string cache_dir = "/var/lib/cni";
  int timeout_s = 60;
  bool negotiate = false;   // --negotiate-version
};

// Everything a subcommand may touch; tests build one with fake streams.
struct Context {
  std::function<const char*(const char*)> getenv;
  std::vector<std::string> environ;  // handed to plugins, as libcni does
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  GlobalOptions global;

  std::string Env(const char* key) const;
  std::string ConfDir() const;
  std::vector<std::string> PluginDirs() const;

  // Prints `st` as "weftctl <what>: <msg>" (+ details) on stderr, and as a
  // CNI error object on stdout with --json. Returns the exit code for it:
  // kExitExec when the CNI code is 109 (cni::IsExecFailure), else `fallback`.
  int Fail(const std::string& what, const Status& st, int fallback = kExitFailed) const;
};

// The real process: getenv, environ, std::cout, std::cerr.
Context ProcessContext();

class Command {
 public:
  virtual ~Command() = default;
  // Adds the subcommand (with its options bound to members) to `app`.
  virtual CLI::App* Register(CLI::App& app) = 0;
  virtual int Run(Context& ctx) = 0;
};

class Ctl {
 public:
  Ctl();
  ~Ctl();
  void Add(std::unique_ptr<Command> cmd);
  // What --version prints ("weftctl 0.4.0 (commit …)"); without it there is
  // no --version flag.
  void SetVersion(std::string version) { version_ = std::move(version); }
  // Parses argv, runs the chosen subcommand, returns the exit code.
  int Main(int argc, const char* const* argv, Context ctx);

 private:
  std::vector<std::unique_ptr<Command>> commands_;
  std::string version_;
};

// add, check, del, status, gc, conf.
void AddCniCommands(Ctl& ctl);

// cnitool's container ID for a netns path: "cnitool-" + the first 20 hex
// digits of SHA-512 of the absolute path, so weftctl and cnitool attach and
// detach the same IDs.
std::string CnitoolContainerId(const std::string& netns_path);

}  // namespace weft::runtime::ctl
