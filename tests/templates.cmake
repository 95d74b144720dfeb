# Default-template sweep (tests/unit/test_templates.c): MatMul (all four
# transposes, GEMV, tails in M, N, K), BatchMatMul (batch broadcasting),
# MatMul + bias + GeLU + Cast epilogues, reductions, softmax, layernorm,
# elementwise chains, Transpose and Conv2D over sizes 1, small primes, odd
# tails around vector widths and a few large shapes; float32, float16,
# int32; each kernel run serially, with a 3-thread runtime (and with
# parallel_grain 1) and compared with the reference interpreter. About a
# minute on 2 cores; KC_TEMPLATES_SWEEP=full (or --full) runs the long
# sweep, KC_TEMPLATES_FILTER=SUBSTR a subset.
add_executable(test_templates ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_templates.c)
target_link_libraries(test_templates PRIVATE kc_compiler kc_t dl m Threads::Threads)
add_test(NAME test_templates COMMAND test_templates)
set_tests_properties(test_templates PROPERTIES LABELS slow TIMEOUT 900)
