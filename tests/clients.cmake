# clients: end-to-end tests of kcsd through the Python client and the kcs CLI.
#   http_corpus  every first-slice file of ../shared/corpus/akg compiled,
#                run (rt=NULL and a 3-thread runtime) and compared with a
#                numpy reference; cache hits before and after a restart.
#                Prints "# SKIP corpus absent" and passes when it is absent.
#                The compiles are the corpus fixture's (tests/corpus.cmake).
#   http_cli     kcs compile/get/version, error printing, feature refusal.
if(TARGET kcsd)
  add_test(NAME http_corpus
           COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_corpus.py
                   --kcsd $<TARGET_FILE:kcsd> --fixture ${CMAKE_CURRENT_BINARY_DIR}/corpus)
  set_tests_properties(http_corpus PROPERTIES LABELS slow TIMEOUT 1800 FIXTURES_REQUIRED corpus)
  if(TARGET kcs)
    add_test(NAME http_cli
             COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_cli.py
                     --kcsd $<TARGET_FILE:kcsd> --kcs $<TARGET_FILE:kcs>)
    set_tests_properties(http_cli PROPERTIES LABELS fast TIMEOUT 300)
  endif()
endif()
