# The AKG corpus as a conformance suite (tests/http/test_conformance.py):
# every file verified for cpu against the interpreter through POST
# /v1/verify; refusals only where docs/conformance.md justifies them.
# `--write` regenerates docs/conformance.md. Skipped (77) without ../shared.
# Under ctest it works from the corpus fixture (tests/corpus.cmake): kcsd's
# compiles, each kernel run in kcsd-runner as /v1/verify runs it, against
# the interpreter's outputs computed once for all corpus tests.
add_test(NAME http_conformance
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_conformance.py
                 --kcsd $<TARGET_FILE:kcsd> --fixture ${CMAKE_CURRENT_BINARY_DIR}/corpus)
set_tests_properties(http_conformance PROPERTIES LABELS slow TIMEOUT 3600 SKIP_RETURN_CODE 77
                     FIXTURES_REQUIRED corpus)
