add_executable(test_common ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_common.c)
target_link_libraries(test_common PRIVATE kc_common kc_t)
add_test(NAME test_common COMMAND test_common)
set_tests_properties(test_common PROPERTIES LABELS fast)
