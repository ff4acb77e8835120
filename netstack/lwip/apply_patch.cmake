# apply_patch.cmake: copy FILES (paths under LWIP_DIR/src) into OUT_DIR/src with
# CRLF turned into LF, then apply PATCH_FILE there with GNU patch.
#
# lwIP's files use CRLF line endings; the patch is kept with LF endings so that
# git, editors and review tools cannot silently break it. The work happens in a
# scratch directory, and the outputs are replaced only when the patch applied,
# so a failed run never leaves unpatched files that look up to date. --fuzz=0:
# every context line must match, so a different lwIP fails here, loudly.
# Run as: cmake -DLWIP_DIR=... -DOUT_DIR=... -DPATCH_FILE=... -DPATCH_PROGRAM=... -DFILES=a|b -P apply_patch.cmake

foreach(v LWIP_DIR OUT_DIR PATCH_FILE PATCH_PROGRAM FILES)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "apply_patch.cmake: ${v} is not set")
  endif()
endforeach()

string(REPLACE "|" ";" FILES "${FILES}")
set(scratch ${OUT_DIR}.tmp)
file(REMOVE_RECURSE ${scratch})
foreach(f ${FILES})
  file(READ ${LWIP_DIR}/src/${f} text)
  string(REPLACE "\r\n" "\n" text "${text}")
  file(WRITE ${scratch}/src/${f} "${text}")
endforeach()

execute_process(
  COMMAND ${PATCH_PROGRAM} -p1 --batch --forward --fuzz=0 --silent --no-backup-if-mismatch --reject-file=-
          -d ${scratch} -i ${PATCH_FILE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR
    "${PATCH_FILE} does not apply to the lwIP source in ${LWIP_DIR} (is it lwIP 2.1.3?):\n${out}")
endif()

foreach(f ${FILES})
  # A plain copy (not copy_if_different): the outputs must end up newer than
  # the patch, or the build tool would run this step on every build.
  execute_process(COMMAND ${CMAKE_COMMAND} -E copy ${scratch}/src/${f} ${OUT_DIR}/src/${f}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "apply_patch.cmake: could not write ${OUT_DIR}/src/${f}")
  endif()
endforeach()
file(REMOVE_RECURSE ${scratch})
