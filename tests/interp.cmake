# Reference interpreter (graph/interp.c): every op against hand-computed
# values, then compiled kernels (hand-built graphs and the corpus) against
# it; MindSpore's kernel-name hash (graph/mshash.c) against the corpus.
foreach(t test_interp test_mshash)
  add_executable(${t} ${CMAKE_CURRENT_SOURCE_DIR}/unit/${t}.c)
  target_link_libraries(${t} PRIVATE kc_compiler kc_t PkgConfig::CJSON dl m)
  add_test(NAME ${t} COMMAND ${t})
endforeach()
# The corpus part compares kcsd's kernels with the interpreter's outputs
# from the corpus fixture (tests/corpus.cmake); run by hand without
# KC_CORPUS_FIXTURE, it compiles and interprets the corpus itself.
set_tests_properties(test_interp PROPERTIES LABELS slow TIMEOUT 600 FIXTURES_REQUIRED corpus
                     ENVIRONMENT KC_CORPUS_FIXTURE=${CMAKE_CURRENT_BINARY_DIR}/corpus)
set_tests_properties(test_mshash PROPERTIES LABELS fast TIMEOUT 120)
# POST /v1/verify and ms_hash against a live daemon (tests/http/test_verify.py).
add_test(NAME http_verify
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_verify.py --kcsd $<TARGET_FILE:kcsd>)
set_tests_properties(http_verify PROPERTIES LABELS slow TIMEOUT 600)
# The verify slots, the ?threads clamp and the daemon's memory under three
# concurrent 128 MiB verifies (tests/http/test_verify_load.py).
add_test(NAME http_verify_gate
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_verify_load.py
                 --kcsd $<TARGET_FILE:kcsd> --only gate)
set_tests_properties(http_verify_gate PROPERTIES LABELS "fast;tsan" TIMEOUT 120)
add_test(NAME http_verify_load
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_verify_load.py
                 --kcsd $<TARGET_FILE:kcsd> --only load)
set_tests_properties(http_verify_load PROPERTIES LABELS slow TIMEOUT 600)
