# Layers enforced by the build (docs/architecture.md, "Layers").
#
# Headers are included by layer ("base/log.h", "sys/netns.h"), so the parent
# of a layer's directory would be the natural include root; but src/ holds
# every layer, and -I src lets any file include any layer. Instead each layer
# gets a root of its own in the build tree that holds one entry, a link to its
# directory:
#   <build>/include/sys/sys -> src/sys
# and the layer's library exposes that root PUBLIC. A target then sees the
# headers of its own layer and of the libraries it links, and nothing else:
# an #include that runs up a layer, or sideways to a layer not linked, is
# "No such file" at compile time. There is no global include path.
# Same-directory includes ("node_state.h") still resolve beside the file.

# weft_layer_headers(<target> <PUBLIC|PRIVATE|INTERFACE>): <target> sees the
# headers of the current source directory as "<dirname>/x.h" (PUBLIC: so do
# the targets that link it). Call it from the layer's CMakeLists.txt.
function(weft_layer_headers target scope)
  get_filename_component(name ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  set(root ${CMAKE_BINARY_DIR}/include/${name})
  get_property(dir GLOBAL PROPERTY WEFT_LAYER_DIR_${name})
  if(dir AND NOT dir STREQUAL CMAKE_CURRENT_SOURCE_DIR)
    message(FATAL_ERROR "two layers named '${name}': ${dir} and ${CMAKE_CURRENT_SOURCE_DIR}")
  endif()
  set_property(GLOBAL PROPERTY WEFT_LAYER_DIR_${name} ${CMAKE_CURRENT_SOURCE_DIR})
  set(old "")
  if(IS_SYMLINK ${root}/${name})
    file(READ_SYMLINK ${root}/${name} old)
  endif()
  if(NOT old STREQUAL CMAKE_CURRENT_SOURCE_DIR)  # new tree, or the checkout moved
    file(REMOVE ${root}/${name})
    file(MAKE_DIRECTORY ${root})
    # No COPY_ON_ERROR: a copy would go stale silently; without links, fail.
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR} ${root}/${name} SYMBOLIC)
  endif()
  target_include_directories(${target} ${scope} ${root})
  set_property(GLOBAL APPEND PROPERTY WEFT_LAYER_TARGETS "${name}=${target}")
endfunction()

# weft_layers_test(): the CTest `layers_test` (label unit) proves the rule
# with the compiler: from each layer's directory, a file that includes a
# header of each other layer is preprocessed with the include path of the
# layer's library (scripts/check-layers.sh). It must resolve for the layers
# below (the DAG in scripts/layers.sh) and fail with "No such file" for every
# other. The include graph of the sources is checked against the same DAG
# (scripts/include-graph.sh --check). Called after every target exists.
function(weft_layers_test)
  get_property(pairs GLOBAL PROPERTY WEFT_LAYER_TARGETS)
  set(dir ${CMAKE_BINARY_DIR}/layers)
  file(REMOVE_RECURSE ${dir})
  set(done "")
  foreach(p ${pairs})
    string(REPLACE "=" ";" p "${p}")
    list(GET p 0 name)
    list(GET p 1 target)
    # The first library that declared a layer stands for it (weft_runtime,
    # not weft_ctl; weft_sys, not weft_http; weft_policy, not weft_netpol).
    if(name IN_LIST done)
      continue()
    endif()
    list(APPEND done ${name})
    file(GENERATE OUTPUT ${dir}/${name}.inc CONTENT
      "$<JOIN:$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>,\n>\n")
    file(READ_SYMLINK ${CMAKE_BINARY_DIR}/include/${name}/${name} src)
    file(APPEND ${dir}/layers.txt "${name} ${target} ${src}\n")
  endforeach()
  add_test(NAME layers_test
           COMMAND ${CMAKE_SOURCE_DIR}/scripts/check-layers.sh ${dir} ${CMAKE_CXX_COMPILER})
  set_tests_properties(layers_test PROPERTIES LABELS unit TIMEOUT 300)
endfunction()
