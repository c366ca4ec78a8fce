# weir_add_plugin(KIND NAME [DEVICE dev] SOURCES ... [LIBS ...])
# Builds lib/weir/plugins/weir_<kind>_<name>[_<dev>].so with hidden visibility; installs it.
function(weir_add_plugin kind name)
  cmake_parse_arguments(P "" "DEVICE;OUTPUT_DIR" "SOURCES;LIBS" ${ARGN})
  set(file "weir_${kind}_${name}")
  if(P_DEVICE)
    set(file "${file}_${P_DEVICE}")
  endif()
  add_library(${file} MODULE ${P_SOURCES})
  set_target_properties(${file} PROPERTIES PREFIX "" OUTPUT_NAME ${file}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${file} PRIVATE weir_sdk ${P_LIBS})
  # One version scheme for every plugin weir ships: weir's own version (docs/plugin-guide.md,
  # "Ship"), so a CPU plugin and its CUDA twin always say the same.
  target_compile_definitions(${file} PRIVATE WEIR_PLUGIN_VERSION="${PROJECT_VERSION}")
  if(NOT P_OUTPUT_DIR)
    set(P_OUTPUT_DIR ${WEIR_PLUGIN_OUTPUT_DIR})
    install(TARGETS ${file} LIBRARY DESTINATION ${WEIR_PLUGIN_INSTALL_DIR})
  endif()
  set_target_properties(${file} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR})
  set_property(GLOBAL APPEND PROPERTY WEIR_PLUGIN_TARGETS ${file})
endfunction()

# Adds every <dir>/*/CMakeLists.txt (and <dir>/*/*/CMakeLists.txt) below a folder, so a new
# plugin or test suite needs no edit of a shared file.
function(weir_add_subdirs dir depth)
  if(depth EQUAL 2)
    file(GLOB _lists CONFIGURE_DEPENDS ${dir}/*/*/CMakeLists.txt)
  else()
    file(GLOB _lists CONFIGURE_DEPENDS ${dir}/*/CMakeLists.txt)
  endif()
  list(SORT _lists)
  foreach(l IN LISTS _lists)
    get_filename_component(d ${l} DIRECTORY)
    add_subdirectory(${d})
  endforeach()
endfunction()
