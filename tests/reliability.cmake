# Reliability: kill -9 under load and damaged state (truncated, overwritten,
# stale lock), 20 rounds each, against a live kcsd on loopback
# (tests/http/test_reliability.py; docs/durability.md says what it checks).
add_test(NAME http_reliability
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_reliability.py
                 --kcsd $<TARGET_FILE:kcsd> --rounds 20)
set_tests_properties(http_reliability PROPERTIES LABELS slow TIMEOUT 300)
# The sharing and admin endpoints (export, import, delete, evict, backup):
# fast, so they also run under ASan+UBSan.
add_test(NAME http_admin
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_reliability.py
                 --kcsd $<TARGET_FILE:kcsd> --only admin)
set_tests_properties(http_admin PROPERTIES LABELS fast TIMEOUT 120)
