# AArch64 kernels under qemu-user (tests/unit/test_aarch64.c): the kernel
# runner (tests/aarch64/runner.c) is cross-compiled with aarch64-linux-gnu-gcc
# (Debian: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross) and run by
# qemu-aarch64 -L /usr/aarch64-linux-gnu (qemu-user). When either is
# missing, test_aarch64 is still registered and reports a TAP skip.
find_program(KC_AARCH64_CC aarch64-linux-gnu-gcc)
find_program(KC_QEMU_AARCH64 qemu-aarch64)
set(KC_AARCH64_SYSROOT /usr/aarch64-linux-gnu CACHE PATH "AArch64 libc for qemu-aarch64 -L")

add_executable(test_aarch64 ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_aarch64.c)
target_link_libraries(test_aarch64 PRIVATE kc_compiler kc_t PkgConfig::CJSON dl m)

if(KC_AARCH64_CC AND KC_QEMU_AARCH64 AND EXISTS ${KC_AARCH64_SYSROOT}/lib)
  set(_runner ${CMAKE_CURRENT_BINARY_DIR}/aarch64_runner)
  set(_werror "")
  if(KC_WERROR)
    set(_werror -Werror)
  endif()
  # Dynamic, so it can dlopen kernels; --no-as-needed keeps libm loaded
  # for the kernels' undefined libm symbols.
  add_custom_command(
    OUTPUT ${_runner}
    COMMAND ${KC_AARCH64_CC} -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Wpedantic -Wshadow
            -Wstrict-prototypes ${_werror} -I${CMAKE_SOURCE_DIR}/clients/include
            -I${CMAKE_CURRENT_SOURCE_DIR} -o ${_runner} ${CMAKE_CURRENT_SOURCE_DIR}/aarch64/runner.c
            ${CMAKE_CURRENT_SOURCE_DIR}/tkernel.c -Wl,--no-as-needed -lm -ldl -lpthread
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/aarch64/runner.c ${CMAKE_CURRENT_SOURCE_DIR}/tkernel.c
            ${CMAKE_CURRENT_SOURCE_DIR}/tkernel.h ${CMAKE_SOURCE_DIR}/clients/include/kcs_abi.h
    COMMENT "Cross-compiling the aarch64 kernel runner"
    VERBATIM)
  # Not named aarch64_runner: Ninja's per-folder alias of such a target
  # would be tests/aarch64_runner, the very file the command makes.
  add_custom_target(kc_aarch64_runner ALL DEPENDS ${_runner})
  add_dependencies(test_aarch64 kc_aarch64_runner)
  add_test(NAME test_aarch64
           COMMAND test_aarch64 ${_runner} ${KC_QEMU_AARCH64} ${KC_AARCH64_SYSROOT})
else()
  message(STATUS "aarch64-linux-gnu-gcc, qemu-aarch64 or ${KC_AARCH64_SYSROOT}/lib missing: test_aarch64 will skip")
  add_test(NAME test_aarch64 COMMAND test_aarch64)
endif()
set_tests_properties(test_aarch64 PROPERTIES LABELS slow TIMEOUT 600)
