# Cache tests: tests/unit/test_cache.c against a temporary LMDB environment.
add_executable(test_cache ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_cache.c)
target_link_libraries(test_cache PRIVATE kc_cache kc_t)
add_test(NAME test_cache COMMAND test_cache)
set_tests_properties(test_cache PROPERTIES LABELS "fast;tsan" TIMEOUT 120)
# The store's reference audit for the HTTP tests (tests/cache_audit.c).
add_executable(cache_audit ${CMAKE_CURRENT_SOURCE_DIR}/cache_audit.c)
target_link_libraries(cache_audit PRIVATE kc_cache)
# The store's size limits over HTTP: workload records evicted with their
# last kernel, the data file within cache_map_bytes, a full store still
# answering compiles (not stored), the canonical workload cap
# (tests/http/test_store_limits.py).
add_test(NAME http_store_limits
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_store_limits.py
                 --kcsd $<TARGET_FILE:kcsd> --audit $<TARGET_FILE:cache_audit>)
set_tests_properties(http_store_limits PROPERTIES LABELS fast TIMEOUT 300)
