# The schedule knob table (loop/knobs.def) and the schedule record
# checker: tests/unit/test_knobs.c. docs_knobs fails when docs/api.md's knob
# table is not what scripts/gen-docs makes from the table.
add_executable(test_knobs ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_knobs.c)
target_link_libraries(test_knobs PRIVATE kc_compiler kc_t)
add_test(NAME test_knobs COMMAND test_knobs)
set_tests_properties(test_knobs PROPERTIES LABELS fast TIMEOUT 60)

add_executable(knobs_md ${CMAKE_SOURCE_DIR}/scripts/knobs_md.c)
target_link_libraries(knobs_md PRIVATE kc_compiler)
add_test(NAME docs_knobs
         COMMAND ${CMAKE_SOURCE_DIR}/scripts/gen-docs --check --tool $<TARGET_FILE:knobs_md>)
set_tests_properties(docs_knobs PROPERTIES LABELS fast TIMEOUT 60)
