# The architecture tour against the tree (tests/docs/check_docs.py): every
# path and function docs/ARCHITECTURE.md names exists, and the page holds
# no before -> after figures, no history and no over-long sentences;
# docs_selftest plants each kind of problem and expects it reported.
add_test(NAME docs_architecture
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/docs/check_docs.py
                 --root ${CMAKE_SOURCE_DIR} --build ${CMAKE_BINARY_DIR} docs/ARCHITECTURE.md)
add_test(NAME docs_selftest
         COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/docs/check_docs.py
                 --root ${CMAKE_SOURCE_DIR} --selftest)
set_tests_properties(docs_architecture docs_selftest PROPERTIES LABELS fast TIMEOUT 60)
