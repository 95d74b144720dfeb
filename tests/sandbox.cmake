# The children's sandbox from the inside (tests/unit/test_sandbox.c): each
# role in a forked child, what it may and may not do; as root, again as
# uid 65534, where RLIMIT_NPROC 0 binds.
add_executable(test_sandbox ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sandbox.c)
target_link_libraries(test_sandbox PRIVATE kc_sandbox kc_t Threads::Threads)
add_test(NAME test_sandbox COMMAND test_sandbox)
set_tests_properties(test_sandbox PROPERTIES LABELS fast TIMEOUT 60)
# The same from the outside (tests/http/test_sandbox.py): /proc of a live
# kcsd's workers, their link helpers and a verify runner.
add_test(NAME http_sandbox
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_sandbox.py
                 --kcsd $<TARGET_FILE:kcsd>)
set_tests_properties(http_sandbox PROPERTIES LABELS "fast;tsan" TIMEOUT 120)
