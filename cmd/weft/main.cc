// weft: the CNI plugin. One process per pod operation.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cni/skel.h"
#include "plugin/weft_plugin.h"

int main() {
  if (!std::getenv("CNI_COMMAND") && isatty(STDIN_FILENO)) {
    std::fputs("weft CNI plugin 0.1.0: CNI spec 0.1.0 to 1.1.0. Run by container runtimes;\n"
               "see docs/plugin.md. Set CNI_COMMAND=VERSION to list supported versions.\n",
               stderr);
    return 0;
  }
  std::string in;
  char buf[65536];
  ssize_t n;
  while ((n = read(STDIN_FILENO, buf, sizeof buf)) > 0) in.append(buf, static_cast<size_t>(n));
  weft::plugin::WeftPlugin plugin;
  std::string out;
  int rc = weft::cni::PluginMain(plugin, [](const char* k) { return std::getenv(k); }, in, &out);
  if (!out.empty()) (void)!write(STDOUT_FILENO, out.data(), out.size());
  return rc;
}
