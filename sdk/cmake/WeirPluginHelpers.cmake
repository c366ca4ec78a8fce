# weir_add_plugin(KIND NAME SOURCES ... [DEVICE dev] [LIBS ...] [INSTALL_DIR dir] [NO_INSTALL])
#
# For plugins built out of tree against an installed weir (find_package(weir)). Builds the
# module weir_<kind>_<name>.so (weir_<kind>_<name>_<dev>.so with DEVICE) with hidden
# visibility, so that only weir_plugin_entry (and weir_plugin_score) are exported, linked to
# weir::sdk; installs it into INSTALL_DIR, by default lib/weir/plugins under this project's
# install prefix. Point weir at it with plugins.dirs, --plugin-dir or WEIR_PLUGIN_PATH, or
# install it with -DCMAKE_INSTALL_PREFIX=<weir's prefix> to sit next to the shipped plugins.
# KIND is one of device, attention, quant, sampler, drafter.
include_guard(GLOBAL)
function(weir_add_plugin kind name)
  cmake_parse_arguments(P "NO_INSTALL" "DEVICE;INSTALL_DIR" "SOURCES;LIBS" ${ARGN})
  if(NOT kind MATCHES "^(device|attention|quant|sampler|drafter)$")
    message(FATAL_ERROR "weir_add_plugin: kind '${kind}' is not one of device, attention, quant, sampler, drafter")
  endif()
  if(NOT name MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "weir_add_plugin: name '${name}' must be lower-case letters, digits and '_'")
  endif()
  set(file "weir_${kind}_${name}")
  if(P_DEVICE)
    set(file "${file}_${P_DEVICE}")
  endif()
  add_library(${file} MODULE ${P_SOURCES})
  set_target_properties(${file} PROPERTIES PREFIX "" SUFFIX ".so" OUTPUT_NAME ${file}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${file} PRIVATE weir::sdk ${P_LIBS})
  if(NOT P_NO_INSTALL)
    if(NOT P_INSTALL_DIR)
      include(GNUInstallDirs)
      set(P_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/weir/plugins")
    endif()
    install(TARGETS ${file} LIBRARY DESTINATION ${P_INSTALL_DIR})
  endif()
endfunction()
