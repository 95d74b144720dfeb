# systemd unit check: systemd-analyze verify on a copy of systemd/kcsd.service
# whose ExecStart= points at the built kcsd (or /bin/true without it).
if(TARGET kcsd)
  set(_kc_unit_exe $<TARGET_FILE:kcsd>)
else()
  set(_kc_unit_exe /bin/true)
endif()
add_test(NAME systemd_verify
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/systemd_verify.sh
                 ${CMAKE_SOURCE_DIR}/systemd/kcsd.service ${_kc_unit_exe})
set_tests_properties(systemd_verify PROPERTIES LABELS fast TIMEOUT 60)
