# ctest calibrate_errors: dmuon-calibrate ends with status 1 and a message,
# never 0 after writing nothing nor an abort, on outputs it cannot write
# (/dev/full), two outputs on one file, and shapes or buffer sizes past
# memory (checked before anything is allocated; 200000x200000 needs ~1 TB).
# -DMPIEXEC -DNPFLAG -DCALIBRATE -DWORK come from test/distributed/CMakeLists.txt.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# Runs dmuon-calibrate on `ranks` ranks with the remaining arguments and
# checks it exits 1 with `expected` (a regex) in its stderr.
function(expect_error ranks expected)
  execute_process(
    COMMAND ${MPIEXEC} --oversubscribe ${NPFLAG} ${ranks} ${CALIBRATE} --repeats 1 ${ARGN}
    WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  # mpiexec reports a rank's status 1 as its own 1; an abort is 134 or a
  # signal's name.
  if(NOT rc EQUAL 1)
    message(FATAL_ERROR "dmuon-calibrate ${ARGN}: status ${rc}, not 1:\n${out}${err}")
  endif()
  if(NOT err MATCHES "dmuon-calibrate: error: ${expected}")
    message(FATAL_ERROR "dmuon-calibrate ${ARGN}: no 'error: ${expected}' in:\n${err}")
  endif()
  if(err MATCHES "bad_alloc|length_error|signal")
    message(FATAL_ERROR "dmuon-calibrate ${ARGN} aborted:\n${err}")
  endif()
endfunction()

# Write errors name the file (a full disk reads the same as /dev/full).
expect_error(1 "'/dev/full': No space left on device" --max-bytes 4096 -o /dev/full)
expect_error(1 "'/dev/full': No space left on device" --max-bytes 4096 --shapes 64x64
             -o ${WORK}/ok.toml --ns-table /dev/full)

# -o X --ns-table X would keep only the cost table: refused, nothing written.
expect_error(1 "-o 'same' and --ns-table './same' are one file" --shapes 64x64 -o same
             --ns-table ./same)
if(EXISTS ${WORK}/same)
  message(FATAL_ERROR "dmuon-calibrate wrote 'same' although it refused the run")
endif()

# Sizes past memory, on 2 ranks so that the collectives' buffers are used.
expect_error(1 "--shapes 3037000500x3037000500 has more than 2\\^40 elements"
             --shapes 3037000500x3037000500)
expect_error(1 "--shapes 200000x200000 needs [0-9.e+]+ bytes per rank, more than the"
             --shapes 200000x200000)
expect_error(2 "--max-bytes 4611686018427387904 is past the largest buffer dmuon-calibrate measures, 1073741824"
             --max-bytes 4611686018427387904)
