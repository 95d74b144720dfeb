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
# A wedged compile (?inject=hang) with duplicates parked on it leaves the
# other worker free, and SIGTERM still ends kcsd within shutdown_grace_s
# (tests/http/test_wedge.py).
add_test(NAME http_wedge
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_wedge.py
                 --kcsd $<TARGET_FILE:kcsd>)
set_tests_properties(http_wedge PROPERTIES LABELS "fast;tsan" TIMEOUT 120)
# Compile workers: injected crash, hang and memory bomb, kill -9 mid-compile
# (20 rounds), the negative cache and DELETE, a worker of another build
# (tests/http/test_workers.py); the 200-compile run with random worker
# kills is the slow part.
add_test(NAME http_workers
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_workers.py
                 --kcsd $<TARGET_FILE:kcsd>)
set_tests_properties(http_workers PROPERTIES LABELS "fast;tsan" TIMEOUT 240)
add_test(NAME http_workers_load
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_workers.py
                 --kcsd $<TARGET_FILE:kcsd> --load)
set_tests_properties(http_workers_load PROPERTIES LABELS slow TIMEOUT 300)
