# Helpers shared by every CMakeLists of zerolm.

# zlm_add_tool(<name> SOURCES main.cpp [LIB_SOURCES logic.cpp ...] [LIBS extra...])
# One binary in build/bin/, linked to zlm_formats, zlm_io (and so zlm_core) and the warnings
# target; LIBS adds zlm_text, zlm_tokenizer or third-party targets.
# LIB_SOURCES (the tool's own logic) become the static library zlm_<name>_lib,
# which the tests link too.
function(zlm_add_tool name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIB_SOURCES;LIBS" ${ARGN})
  set(_libs zlm_formats zlm_io ${ARG_LIBS})
  if(ARG_LIB_SOURCES)
    add_library(zlm_${name}_lib STATIC ${ARG_LIB_SOURCES})
    target_link_libraries(zlm_${name}_lib PUBLIC ${_libs} PRIVATE zlm_warnings)
    set(_libs zlm_${name}_lib)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${_libs} zlm_warnings)
  install(TARGETS ${name} RUNTIME DESTINATION bin)
endfunction()

# zlm_generate_build_info(): writes build_info.cpp with git describe, build type
# and compiler, printed by --version and at the top of every log.
function(zlm_generate_build_info)
  set(ZLM_GIT_DESCRIBE "unknown")
  find_package(Git QUIET)
  if(GIT_FOUND)
    execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --tags
                    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                    OUTPUT_VARIABLE _desc OUTPUT_STRIP_TRAILING_WHITESPACE
                    ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _desc)
      set(ZLM_GIT_DESCRIBE "${_desc}")
    endif()
  endif()
  set(ZLM_BUILD_TYPE "${CMAKE_BUILD_TYPE}")
  set(ZLM_COMPILER "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/build_info.cpp.in
                 ${PROJECT_BINARY_DIR}/generated/build_info.cpp @ONLY)
endfunction()
