# In-process linker tests: tests/unit/test_link.c links kernels with
# link/link_elf.c and with ld, runs both and compares the outputs, and
# feeds link_elf malformed objects. `test_link bench` prints timings.
add_executable(test_link ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_link.c)
target_link_libraries(test_link PRIVATE kc_compiler kc_cpu kc_link kc_t PkgConfig::CJSON Threads::Threads dl m)
add_test(NAME test_link COMMAND test_link)
set_tests_properties(test_link PROPERTIES LABELS fast TIMEOUT 300)
