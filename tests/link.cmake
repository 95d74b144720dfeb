# In-process linker tests: tests/unit/test_link.c links kernels with
# compiler/link_elf.c and with ld, runs both and compares the outputs, and
# feeds link_elf malformed objects. `test_link bench` prints timings.
add_executable(test_link ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_link.c)
target_link_libraries(test_link PRIVATE kc_compiler kc_t kc_llvm PkgConfig::CJSON Threads::Threads dl m)
target_include_directories(test_link PRIVATE ${CMAKE_SOURCE_DIR}/compiler)
add_test(NAME test_link COMMAND test_link)
set_tests_properties(test_link PROPERTIES LABELS fast TIMEOUT 300)
