# Work bounded by the input (tests/unit/test_work.c): Fibonacci chains of
# 60 ops compile with every pass's visit count within a constant times the
# graph's values, and the work budget (KcLimits, server/config.def) trips
# naming the pass and the limit; tests/http/test_work_budget.py checks the
# 422 work_budget_exceeded of a daemon with a small budget.
add_executable(test_work ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_work.c)
target_link_libraries(test_work PRIVATE kc_compiler kc_t)
add_test(NAME test_work COMMAND test_work)
set_tests_properties(test_work PROPERTIES LABELS fast TIMEOUT 300)
add_test(NAME http_work_budget
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_work_budget.py
                 --kcsd $<TARGET_FILE:kcsd>)
set_tests_properties(http_work_budget PROPERTIES LABELS fast TIMEOUT 300)
