# Helpers shared by every CMakeLists of zerolm.

# zlm_add_tool(<name> SOURCES a.cpp ... [LIBS extra...])
# One binary in build/bin/, linked to the core libraries and the warnings target.
function(zlm_add_tool name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE zlm_formats zlm_common ${ARG_LIBS} zlm_warnings)
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
