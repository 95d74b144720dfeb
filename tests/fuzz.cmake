# libFuzzer targets (tests/fuzz/): fuzz_parse (kc_json_scan against cJSON,
# kc_parse + kc_workload on the bytes) and fuzz_route (api_route + kc_target_resolve).
# They need clang's libFuzzer, so they are built only in a separate clang
# configuration with -DKC_FUZZ=ON, which tests/fuzz/run.sh makes in
# <build>/fuzz. The normal build registers one slow test that runs that
# script: it builds the fuzzers, replays tests/fuzz/regressions/ and fuzzes
# each target for a bounded time. It is skipped (exit 77) without clang-19.
if(KC_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KC_FUZZ=ON needs clang (CC=clang-19)")
  endif()
  foreach(_t parse route)
    add_executable(fuzz_${_t} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_${_t}.c)
    target_link_libraries(fuzz_${_t} PRIVATE kc_api kc_compiler kc_common PkgConfig::CJSON)
    target_link_options(fuzz_${_t} PRIVATE -fsanitize=fuzzer)
  endforeach()
else()
  add_test(NAME fuzz
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run.sh
                   --build-dir ${CMAKE_BINARY_DIR}/fuzz --time 60)
  set_tests_properties(fuzz PROPERTIES LABELS slow TIMEOUT 1200 SKIP_RETURN_CODE 77)
endif()
