# The build id is computed when the build runs: an edited compiler source
# changes it after `cmake --build` (tests/build_id/check.sh).
add_test(NAME build_id
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/build_id/check.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}
                 ${CMAKE_GENERATOR} ${PROJECT_VERSION} ${LLVM_VERSION_STR} ${KC_CODEGEN_DIRS})
set_tests_properties(build_id PROPERTIES LABELS fast TIMEOUT 120)
