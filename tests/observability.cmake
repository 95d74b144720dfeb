# Observability: GET /metrics (Prometheus text), GET /v1/stats, and the
# systemd notify protocol (READY=1 after /healthz works, WATCHDOG=1, the
# watchdog going quiet when the worker pool is wedged, STOPPING=1), all
# against a live kcsd (tests/http/test_observability.py). Also the overload
# test (tests/http/test_overload.py): a burst of distinct compiles against
# one worker and a queue of 4.
add_test(NAME http_observability
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_observability.py
                 --kcsd $<TARGET_FILE:kcsd> --only fast)
set_tests_properties(http_observability PROPERTIES LABELS "fast;tsan" TIMEOUT 120)
add_test(NAME http_watchdog_wedge
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_observability.py
                 --kcsd $<TARGET_FILE:kcsd> --only wedge)
set_tests_properties(http_watchdog_wedge PROPERTIES LABELS slow TIMEOUT 300)
add_test(NAME http_overload
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_overload.py
                 --kcsd $<TARGET_FILE:kcsd>)
set_tests_properties(http_overload PROPERTIES LABELS "slow;tsan" TIMEOUT 120)
