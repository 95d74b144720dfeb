# The layering of the compiler and the service, by #include
# (scripts/check-layers), and the check's own refusals.
add_test(NAME layering COMMAND ${KC_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/check-layers ${CMAKE_SOURCE_DIR})
add_test(NAME layering_selftest
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/layers/selftest.py ${CMAKE_SOURCE_DIR})
set_tests_properties(layering layering_selftest PROPERTIES LABELS fast TIMEOUT 60)
