# HTTP API tests: start kcsd on an ephemeral port and talk to it
# (tests/http/test_api.py, stdlib Python plus tests/http/kcsd_harness.py).
add_test(NAME http_api
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_api.py --kcsd $<TARGET_FILE:kcsd>)
set_tests_properties(http_api PROPERTIES LABELS "fast;tsan" TIMEOUT 300)
