#include "sys/dl.h"

#include <dlfcn.h>

namespace weft::sys {

Result<void*> LoadLibrary(const std::string& soname) {
  void* lib = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = ::dlerror();
    return Status::Error(Code::kInternal, "load " + soname, err ? err : "dlopen failed");
  }
  return lib;
}

Result<void*> LibrarySymbol(void* lib, const std::string& soname, const char* symbol) {
  ::dlerror();
  void* p = ::dlsym(lib, symbol);
  if (!p) return Status::Error(Code::kInternal, "load " + soname, std::string("no symbol ") + symbol);
  return p;
}

}  // namespace weft::sys
