# Compiler front end: parser, canonical form / workload key, target names.
foreach(t test_parse test_canon test_target)
  add_executable(${t} ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.c)
  target_link_libraries(${t} PRIVATE kc_compiler kc_graph kc_t PkgConfig::CJSON)
  add_test(NAME ${t} COMMAND ${t})
  set_tests_properties(${t} PROPERTIES LABELS fast)
endforeach()
