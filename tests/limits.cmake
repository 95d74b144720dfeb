# Memory and connection limits under a hostile client
# (tests/http/test_limits.py): an 8 MiB body budget with held near-cap
# uploads (503 past it), trickling connections reaped by the request
# deadline, a cache-hit loop that keeps answering 200, RSS bounds, and the
# JSON pre-scan's 413s. Real waiting on the deadline, and RSS bounds that
# ASan's quarantine would break: slow.
add_test(NAME http_limits
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_limits.py
                 --kcsd $<TARGET_FILE:kcsd>)
set_tests_properties(http_limits PROPERTIES LABELS slow TIMEOUT 120)
