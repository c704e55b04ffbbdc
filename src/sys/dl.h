#pragma once
// Loading a shared library at run time, for dependencies that are heavy and
// only sometimes needed (libcurl for HTTPS: linked in, it and its TLS, LDAP,
// SSH and Kerberos libraries cost weftd ~8 MB of RSS even when unused).

#include <string>

#include "base/status.h"

namespace weft::sys {

// dlopen(RTLD_NOW | RTLD_LOCAL); the library stays loaded for the process's
// lifetime. Thread-safe.
Result<void*> LoadLibrary(const std::string& soname);
// dlsym; an error names the missing symbol.
Result<void*> LibrarySymbol(void* lib, const std::string& soname, const char* symbol);

}  // namespace weft::sys
