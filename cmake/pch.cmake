# Precompiled headers for clang builds (./build-san, scripts/build.sh --san):
# nlohmann/json, GoogleTest and the standard headers nearly every translation
# unit includes are parsed, and their templates instantiated, once per build
# tree instead of once per file. Two donors; every other target reuses one:
#   weft_pch_test  json + gtest + std   targets that link GoogleTest (tests)
#   weft_pch_lib   json + std           other targets that link nlohmann_json
# Targets that link neither get none. Included from the root CMakeLists.txt
# after every target exists, so a new target is covered without editing this.
#
# Not for GCC: with a PCH, GCC 12's middle-end false positives inside
# libstdc++ (-Wstringop-overread in std::string::find at -O2, the kind -O3's
# -Wrestrict already showed) are no longer silenced as coming from a system
# header, and -Werror turns them into failures the plain build never sees.
# The Release tree, without a PCH, also proves that every file includes what
# it uses: here the PCH's headers are visible to every file of a target.
#
# A PCH is used only by files compiled with the flags it was made with; the
# global flags (sanitizers, -O, crash points) reach the donors too, and a
# target-specific -D is fine (clang refuses a PCH whose own -D is missing).
# -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON turns them off.

set(WEFT_PCH_LIB_HEADERS
  <nlohmann/json.hpp>
  <algorithm> <chrono> <cstdint> <functional> <map> <memory> <mutex>
  <optional> <set> <sstream> <string> <string_view> <thread> <utility> <vector>)

# _weft_links(target lib out): out is TRUE when target links lib, directly
# or through the libraries it links (PRIVATE deps of static libraries
# appear as $<LINK_ONLY:...>).
function(_weft_links target lib out)
  set(seen "")
  set(todo ${target})
  while(todo)
    list(POP_FRONT todo t)
    if(t IN_LIST seen OR NOT TARGET ${t})
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(aliased ${t} ALIASED_TARGET)
    if(aliased)
      set(t ${aliased})
    endif()
    if(t STREQUAL lib)
      set(${out} TRUE PARENT_SCOPE)
      return()
    endif()
    set(deps "")
    get_target_property(type ${t} TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct ${t} LINK_LIBRARIES)
      if(direct)
        list(APPEND deps ${direct})
      endif()
    endif()
    get_target_property(iface ${t} INTERFACE_LINK_LIBRARIES)
    if(iface)
      list(APPEND deps ${iface})
    endif()
    foreach(d ${deps})
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" d "${d}")
      if(TARGET ${d})
        list(APPEND todo ${d})
      endif()
    endforeach()
  endwhile()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

function(_weft_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    _weft_targets(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(weft_precompile_headers)
  if(CMAKE_DISABLE_PRECOMPILE_HEADERS OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    return()
  endif()
  _weft_targets(${CMAKE_SOURCE_DIR} targets)
  add_library(weft_pch_lib OBJECT ${CMAKE_SOURCE_DIR}/cmake/pch.cc)
  target_link_libraries(weft_pch_lib PRIVATE nlohmann_json::nlohmann_json)
  target_precompile_headers(weft_pch_lib PRIVATE ${WEFT_PCH_LIB_HEADERS})
  add_library(weft_pch_test OBJECT ${CMAKE_SOURCE_DIR}/cmake/pch.cc)
  target_link_libraries(weft_pch_test PRIVATE nlohmann_json::nlohmann_json GTest::gtest)
  target_precompile_headers(weft_pch_test PRIVATE ${WEFT_PCH_LIB_HEADERS} <gtest/gtest.h>)
  # Lets ccache reuse objects built against an identical PCH.
  target_compile_options(weft_pch_lib PRIVATE -Xclang -fno-pch-timestamp)
  target_compile_options(weft_pch_test PRIVATE -Xclang -fno-pch-timestamp ${WEFT_TEST_CODE_OPTIONS})
  foreach(t ${targets})
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|OBJECT_LIBRARY)$")
      continue()
    endif()
    _weft_links(${t} GTest::gtest with_gtest)
    if(with_gtest)
      target_precompile_headers(${t} REUSE_FROM weft_pch_test)
      continue()
    endif()
    _weft_links(${t} nlohmann_json::nlohmann_json with_json)
    if(with_json)
      target_precompile_headers(${t} REUSE_FROM weft_pch_lib)
    endif()
  endforeach()
endfunction()
