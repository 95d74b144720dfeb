# HTTP API tests: start kcsd on an ephemeral port and talk to it
# (tests/http/test_api.py, stdlib Python plus tests/http/kcsd_harness.py).
add_test(NAME http_api
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_api.py --kcsd $<TARGET_FILE:kcsd>)
set_tests_properties(http_api PROPERTIES LABELS "fast;tsan" TIMEOUT 300)
# GET /v1/kernels/{id}/dump and `kcs compile --dump` (tests/http/test_dump.py).
if(TARGET kcs)
  add_test(NAME http_dump
           COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_dump.py
                   --kcsd $<TARGET_FILE:kcsd> --kcs $<TARGET_FILE:kcs>)
  set_tests_properties(http_dump PROPERTIES LABELS fast TIMEOUT 300)
endif()
