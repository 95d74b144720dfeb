# The corpus fixture: ../shared/corpus/akg compiled and interpreted once per
# ctest run, into ${CMAKE_CURRENT_BINARY_DIR}/corpus, for the tests that
# check every corpus file (FIXTURES_REQUIRED corpus: test_interp,
# http_corpus, http_conformance). Two setup tests, run side by side:
#   corpus_compile  kcsd compiles every file (tests/http/corpus_fixture.py):
#                   objects, compile responses, refusals, and the kcsd state
#                   dir that caches them;
#   corpus_ref      seeded inputs and the reference interpreter's outputs for
#                   every file (tests/corpus_ref.c), which the consumers
#                   compare their kernel runs with.
# Both skip (77) without the corpus, and so do the consumers.
set(KC_CORPUS_FIXTURE ${CMAKE_CURRENT_BINARY_DIR}/corpus)
set(KC_CORPUS_DIR ${CMAKE_SOURCE_DIR}/../shared/corpus/akg)
add_executable(corpus_ref ${CMAKE_CURRENT_SOURCE_DIR}/corpus_ref.c)
target_link_libraries(corpus_ref PRIVATE kc_compiler kc_t PkgConfig::CJSON Threads::Threads)
add_test(NAME corpus_compile
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/corpus_fixture.py
                 --kcsd $<TARGET_FILE:kcsd> --out ${KC_CORPUS_FIXTURE} --corpus ${KC_CORPUS_DIR})
add_test(NAME corpus_ref
         COMMAND corpus_ref --corpus ${KC_CORPUS_DIR} --out ${KC_CORPUS_FIXTURE}/ref)
set_tests_properties(corpus_compile corpus_ref PROPERTIES
                     LABELS slow TIMEOUT 1200 SKIP_RETURN_CODE 77 FIXTURES_SETUP corpus)
# The inputs and reference outputs take gigabytes: gone once the consumers ran.
add_test(NAME corpus_cleanup COMMAND ${CMAKE_COMMAND} -E rm -rf ${KC_CORPUS_FIXTURE}/ref)
set_tests_properties(corpus_cleanup PROPERTIES LABELS slow FIXTURES_CLEANUP corpus)
