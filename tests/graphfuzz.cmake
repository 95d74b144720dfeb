# Differential fuzzing (tests/unit/test_graphfuzz.c): 500 random valid
# graphs compiled for the host and compared with the reference interpreter.
# Fixed default seed (deterministic CI); KC_GRAPHFUZZ_SEED=random or
# --seed N explores other graphs.
add_executable(test_graphfuzz ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_graphfuzz.c)
target_link_libraries(test_graphfuzz PRIVATE kc_compiler kc_t dl m Threads::Threads)
add_test(NAME test_graphfuzz COMMAND test_graphfuzz --count 500)
set_tests_properties(test_graphfuzz PROPERTIES LABELS slow TIMEOUT 600)
