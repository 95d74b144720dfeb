# auth, signing and TLS: black-box tests of kcsd with the kcs CLI and the
# Python client (tests/http/test_auth.py, tests/http/test_tls.py).
#   http_auth  bearer tokens and roles, protected mode, anonymous read,
#              signed artifacts, key rotation, a tampered store never
#              served, clients refusing bad signatures and untrusted keys.
#   http_tls   the HTTP checks over https with a CA made by `openssl`;
#              clients without the CA fail verification.
if(TARGET kcsd AND TARGET kcs)
  add_test(NAME http_auth
           COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_auth.py
                   --kcsd $<TARGET_FILE:kcsd> --kcs $<TARGET_FILE:kcs>)
  add_test(NAME http_tls
           COMMAND ${KC_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/http/test_tls.py
                   --kcsd $<TARGET_FILE:kcsd> --kcs $<TARGET_FILE:kcs>)
  set_tests_properties(http_auth http_tls PROPERTIES LABELS fast TIMEOUT 300)
endif()
