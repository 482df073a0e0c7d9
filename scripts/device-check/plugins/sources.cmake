# sources.cmake: the source lists of the two CUDA plugins, read from the project's own
# compress/CMakeLists.txt and nn/CMakeLists.txt (their `gv_add_plugin(TARGET <plugin> ... SOURCES
# ...)` calls; gv_add_plugin adds common/plugin_shim.c to every plugin, and so does this list), so
# that the device-side rebuild compiles exactly what the main build does. Included by
# CMakeLists.txt beside it; `cmake -DGV_SRC=DIR -P sources.cmake` checks the lists alone.

# gv_plugin_sources(<folder> <target> <out-var>): the absolute paths of <target>'s sources.
function(gv_plugin_sources folder target out)
  set(file ${GV_SRC}/${folder}/CMakeLists.txt)
  if(NOT EXISTS ${file})
    message(FATAL_ERROR "device-check plugins: ${file} is missing")
  endif()
  file(READ ${file} txt)
  string(REGEX MATCH "gv_add_plugin\\(TARGET[ \t\r\n]+${target}[^)]*SOURCES([^)]*)\\)" m
         "${txt}")
  if(NOT m)
    message(FATAL_ERROR
            "device-check plugins: no 'gv_add_plugin(TARGET ${target} ... SOURCES ...)' in ${file}")
  endif()
  string(REGEX REPLACE "[ \t\r\n]+" ";" names "${CMAKE_MATCH_1}")
  set(srcs "")
  foreach(n IN LISTS names)
    if(n STREQUAL "")
      continue()
    endif()
    if(n MATCHES "[$<>]")
      message(FATAL_ERROR "device-check plugins: ${file}: cannot read the source '${n}'")
    endif()
    if(NOT EXISTS ${GV_SRC}/${folder}/${n})
      message(FATAL_ERROR "device-check plugins: ${GV_SRC}/${folder}/${n} is missing")
    endif()
    list(APPEND srcs ${GV_SRC}/${folder}/${n})
  endforeach()
  if(srcs STREQUAL "")
    message(FATAL_ERROR "device-check plugins: ${target} has no sources in ${file}")
  endif()
  if(NOT EXISTS ${GV_SRC}/common/plugin_shim.c)
    message(FATAL_ERROR "device-check plugins: ${GV_SRC}/common/plugin_shim.c is missing")
  endif()
  list(APPEND srcs ${GV_SRC}/common/plugin_shim.c)
  set(${out} ${srcs} PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT GV_SRC)
    get_filename_component(GV_SRC ${CMAKE_CURRENT_LIST_DIR}/../../.. ABSOLUTE)
  endif()
  gv_plugin_sources(compress gravac_compress_cuda cmp)
  gv_plugin_sources(nn gravac_nn_cuda nn)
  message(STATUS "gravac_compress_cuda: ${cmp}")
  message(STATUS "gravac_nn_cuda: ${nn}")
endif()
