# Every library the build needs, checked before any target is defined, each
# with the Debian 12 package that provides it: a machine without one stops
# here with one message naming every missing package, instead of deep in a
# subdirectory with "Could NOT find OpenSSL". scripts/setup.sh installs them
# all. The find_package/pkg_check_modules calls later in the tree stay as
# they are; these only check first.

set(_weft_missing "")
macro(_weft_need found package what)
  if(NOT ${found})
    list(APPEND _weft_missing "${package} (${what})")
  endif()
endmacro()

find_package(PkgConfig QUIET)
_weft_need(PKG_CONFIG_FOUND pkg-config "the pkg-config tool")
if(PKG_CONFIG_FOUND)
  pkg_check_modules(_weft_nl QUIET libnl-3.0)
  _weft_need(_weft_nl_FOUND libnl-3-dev "libnl-3.0")
  pkg_check_modules(_weft_nlr QUIET libnl-route-3.0)
  _weft_need(_weft_nlr_FOUND libnl-route-3-dev "libnl-route-3.0")
  pkg_check_modules(_weft_yaml QUIET yaml-0.1)
  _weft_need(_weft_yaml_FOUND libyaml-dev "yaml-0.1, kubeconfig parsing")
  pkg_check_modules(_weft_nftnl QUIET libnftnl)
  _weft_need(_weft_nftnl_FOUND libnftnl-dev "libnftnl, the nftables layer's encoding (sys/nft_codec.h)")
  pkg_check_modules(_weft_mnl QUIET libmnl)
  _weft_need(_weft_mnl_FOUND libmnl-dev "libmnl, the nftables layer's netlink socket (sys/nft_kernel.h)")
  pkg_check_modules(_weft_nfct QUIET libnetfilter_conntrack)
  _weft_need(_weft_nfct_FOUND libnetfilter-conntrack-dev "libnetfilter_conntrack, weftd's conntrack marks (sys/conntrack.h)")
  pkg_check_modules(_weft_nflog QUIET libnetfilter_log)
  _weft_need(_weft_nflog_FOUND libnetfilter-log-dev "libnetfilter_log, weftd's drop records (sys/nflog.h)")
  pkg_check_modules(_weft_httplib QUIET cpp-httplib)
  _weft_need(_weft_httplib_FOUND libcpp-httplib-dev "cpp-httplib, weftd's status server")
endif()

find_package(nlohmann_json QUIET)
_weft_need(nlohmann_json_FOUND nlohmann-json3-dev "nlohmann/json")
find_package(CURL QUIET)
_weft_need(CURL_FOUND libcurl4-openssl-dev "libcurl, weftd's HTTP client")
find_package(OpenSSL QUIET COMPONENTS Crypto)
_weft_need(OpenSSL_FOUND libssl-dev "OpenSSL's libcrypto, weftctl")
find_package(GTest QUIET)
_weft_need(GTest_FOUND "libgtest-dev libgmock-dev" "GoogleTest")

find_path(_weft_sqlite_h sqlite3.h)
find_library(_weft_sqlite_lib sqlite3)
_weft_need(_weft_sqlite_h libsqlite3-dev "sqlite3.h")
_weft_need(_weft_sqlite_lib libsqlite3-dev "libsqlite3")
find_path(_weft_cli11_h CLI/CLI.hpp)
_weft_need(_weft_cli11_h libcli11-dev "CLI11")

if(_weft_missing)
  list(JOIN _weft_missing "\n  " _weft_list)
  message(FATAL_ERROR "Weft cannot be built: these Debian packages are missing:\n  ${_weft_list}\n"
                      "Install them with `sudo scripts/setup.sh` (it installs everything the build, the demo "
                      "and the tests need), then configure again.")
endif()
