# Formatting: scripts/check-format (clang-format-14 --dry-run -Werror with
# the committed .clang-format over the project's C sources and headers);
# skipped (77) without clang-format-14.
add_test(NAME format COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/check-format)
set_tests_properties(format PROPERTIES LABELS fast TIMEOUT 120 SKIP_RETURN_CODE 77)
