# BuildId.cmake - the build id: a digest of every source that can change the
# code kcsd generates, computed when the build runs (not when CMake
# configures), so an edit followed by `cmake --build` changes kernel ids
# and a persistent cache never serves the old code generator's kernels.
#
# Two roles in one file:
#   include()d:  kc_build_id(<header> <version> <llvm-version> <dir>...)
#                adds the target kc_build_id, which (re)writes <header>
#                whenever a file under one of <dir> changes.
#   cmake -P:    does the hashing; writes the header only if its text
#                changed, so an unchanged id rebuilds nothing.
#
# The digest covers file paths relative to their folder's parent and file
# contents, so renaming or moving a file changes it as well.

if(CMAKE_SCRIPT_MODE_FILE)
  set(_all "${KC_ID_VERSION}\n${KC_ID_LLVM}\n")
  string(REPLACE "|" ";" _dirs "${KC_ID_DIRS}")
  list(LENGTH _dirs _n)
  if(_n EQUAL 0)
    message(FATAL_ERROR "BuildId.cmake: no source folders")
  endif()
  foreach(dir IN LISTS _dirs)
    if(NOT IS_DIRECTORY "${dir}")
      message(FATAL_ERROR "BuildId.cmake: ${dir} is not a folder")
    endif()
    file(GLOB_RECURSE _files LIST_DIRECTORIES false
         "${dir}/*.c" "${dir}/*.h" "${dir}/*.def")
    list(SORT _files)
    get_filename_component(_parent "${dir}" DIRECTORY)
    foreach(f IN LISTS _files)
      file(RELATIVE_PATH _rel "${_parent}" "${f}")
      file(SHA256 "${f}" _h)
      string(APPEND _all "${_rel} ${_h}\n")
    endforeach()
  endforeach()
  string(SHA256 _id "${_all}")
  string(SUBSTRING "${_id}" 0 16 _id)
  set(_text "/* build_id.h - written at build time by cmake/BuildId.cmake. */\n#define KCSD_BUILD_ID \"${_id}\"\n")
  if(EXISTS "${KC_ID_OUT}")
    file(READ "${KC_ID_OUT}" _old)
  else()
    set(_old "")
  endif()
  if(NOT _old STREQUAL _text)
    file(WRITE "${KC_ID_OUT}" "${_text}")
  endif()
  return()
endif()

set(_KC_BUILD_ID_SCRIPT ${CMAKE_CURRENT_LIST_FILE})

function(kc_build_id header version llvm_version)
  set(dirs ${ARGN})
  set(globs "")
  foreach(dir IN LISTS dirs)
    list(APPEND globs "${dir}/*.c" "${dir}/*.h" "${dir}/*.def")
  endforeach()
  # CONFIGURE_DEPENDS: a new or removed file re-runs CMake, so the
  # dependency list below stays complete.
  file(GLOB_RECURSE deps CONFIGURE_DEPENDS ${globs})
  string(REPLACE ";" "|" dirs_arg "${dirs}")
  # The stamp is the command's output, always older than its inputs after
  # an edit; the header is a byproduct that only changes with the id.
  add_custom_command(
    OUTPUT ${header}.stamp
    BYPRODUCTS ${header}
    COMMAND ${CMAKE_COMMAND} -DKC_ID_OUT=${header} -DKC_ID_VERSION=${version}
            -DKC_ID_LLVM=${llvm_version} -DKC_ID_DIRS=${dirs_arg}
            -P ${_KC_BUILD_ID_SCRIPT}
    COMMAND ${CMAKE_COMMAND} -E touch ${header}.stamp
    DEPENDS ${deps} ${_KC_BUILD_ID_SCRIPT}
    COMMENT "Computing the build id"
    VERBATIM)
  add_custom_target(kc_build_id DEPENDS ${header}.stamp)
endfunction()
