# Compiles one CUDA translation unit with ptxas verbose output and fails if any kernel spills
# registers or if ptxas reports a "Potential Performance Loss" (for example C7518: wgmma
# instructions serialized). Both have silently cost 10-25% in lowbit's kernels before.
# Invoked by CTest: cmake -DNVCC=... -DSOURCE=... -DINCLUDES=a;b -DFLAGS=... -P check_ptxas.cmake
set(args ${FLAGS})
foreach(dir ${INCLUDES})
  list(APPEND args "-I${dir}")
endforeach()
execute_process(
  COMMAND ${NVCC} ${args} -Xptxas -v -c ${SOURCE} -o ${OUTPUT}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
set(log "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nvcc failed (${rc}):\n${log}")
endif()
string(REGEX MATCHALL "[0-9]+ bytes spill stores" spills "${log}")
set(bad_spill FALSE)
foreach(s ${spills})
  if(NOT s MATCHES "^0 bytes")
    set(bad_spill TRUE)
  endif()
endforeach()
string(REGEX MATCHALL "Potential Performance Loss[^\n]*" losses "${log}")
list(LENGTH spills nkernels)
# SYNTAX_ONLY: the translation unit exists to prove instruction wrappers assemble (a compile-only
# harness, never launched); its own register use is not a kernel we ship.
if(SYNTAX_ONLY)
  message(STATUS "ptxas check: ${SOURCE} assembles for sm_90a")
  return()
endif()
if(bad_spill OR losses)
  message(FATAL_ERROR "ptxas check failed for ${SOURCE}:\n${log}")
endif()
message(STATUS "ptxas check: ${nkernels} kernels in ${SOURCE}, no spills, no serialization warnings")
