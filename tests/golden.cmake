# Golden loop-nest dumps (tests/golden/README.md): kc_golden prints the
# "lower" and "schedule" dumps of a corpus file for a named target; the
# runner regenerates every (file, target) pair in tests/golden/goldens.list
# and diffs it against tests/golden/<name>.<target>.txt. It prints a SKIP
# line and exits 77 (skipped) without ../shared/corpus/akg.
# scripts/regen-goldens rewrites the expected files.
add_executable(kc_golden ${CMAKE_CURRENT_SOURCE_DIR}/golden/kc_golden.c)
target_link_libraries(kc_golden PRIVATE kc_compiler)

add_test(NAME golden_dumps
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/golden/run $<TARGET_FILE:kc_golden>
                 ${CMAKE_SOURCE_DIR}/../shared/corpus/akg)
set_tests_properties(golden_dumps PROPERTIES LABELS fast TIMEOUT 600 SKIP_RETURN_CODE 77)
