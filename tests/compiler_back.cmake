# Backend tests: tests/unit/test_codegen.c compiles composite graphs to
# shared objects, dlopens them and checks results against C references.
add_executable(test_codegen ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_codegen.c)
target_link_libraries(test_codegen PRIVATE kc_compiler kc_llvm kc_t PkgConfig::CJSON Threads::Threads dl m)
add_test(NAME test_codegen COMMAND test_codegen)
set_tests_properties(test_codegen PROPERTIES LABELS fast TIMEOUT 300)
