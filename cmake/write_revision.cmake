# Writes OUT, a header defining RIDGE_REVISION as `git describe --always --dirty` of SOURCE
# ("unknown" outside a git checkout), and rewrites it only when that text changes, so a build
# recompiles base/build_info.cc only when the revision moved. Run at every build:
#   cmake -DSOURCE=<repo> -DOUT=<header> -P cmake/write_revision.cmake
execute_process(COMMAND git -C "${SOURCE}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                RESULT_VARIABLE code)
if(NOT code EQUAL 0 OR revision STREQUAL "")
  set(revision "unknown")
endif()
set(text "#define RIDGE_REVISION \"${revision}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
