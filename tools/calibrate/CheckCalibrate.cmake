# ctest calibrate_smoke: dmuon-calibrate on 2 ranks, briefly, writes a
# description and a cost table that dmuon-plan --simulate accepts, with
# every collective kind fitted and the table's shape pricing NS; then on 2
# ranks told there is 1 processor, it measures oversubscribed_latency (and
# the kernels on the first rank alone) and the simulator takes it.
# -DMPIEXEC -DNPFLAG -DCALIBRATE -DDMUONC -DDMUON_PLAN -DMODEL -DWORK come
# from tools/CMakeLists.txt.
file(MAKE_DIRECTORY ${WORK})
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe ${NPFLAG} 2 ${CALIBRATE} --repeats 2 --max-bytes 65536
          --shapes 256x256 --ns-table ${WORK}/ns.csv -o ${WORK}/cluster.toml
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dmuon-calibrate exited with ${rc}: ${out}${err}")
endif()
file(READ ${WORK}/cluster.toml text)
foreach(expected "processors_per_node = " "ns_cost_table = \"ns.csv\"" "adamw_bandwidth = "
                 "\\[network.intra.broadcast\\]" "\\[network.intra.reduce\\]"
                 "\\[network.intra.all_reduce\\]" "\\[network.intra.all_gather\\]"
                 "\\[network.intra.reduce_scatter\\]")
  if(NOT text MATCHES "${expected}")
    message(FATAL_ERROR "the description has no '${expected}':\n${text}")
  endif()
endforeach()
file(READ ${WORK}/ns.csv table)
if(NOT table MATCHES "\nrows,cols,seconds\n256,256,[0-9.e-]+\n")
  message(FATAL_ERROR "unexpected cost table:\n${table}")
endif()
execute_process(COMMAND ${DMUONC} ${MODEL} --mesh 2 -o ${WORK}/plan.bin RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dmuonc exited with ${rc}")
endif()
execute_process(COMMAND ${DMUON_PLAN} ${WORK}/plan.bin --simulate=${WORK}/cluster.toml
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dmuon-plan --simulate refused the calibrated description (${rc})")
endif()
# The table's 256x256 time prices each owner's one matrix: NS is not zero.
if(NOT out MATCHES "\ndmuon +[01] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +0\\.[0-9]*[1-9]")
  if(NOT out MATCHES "\ndmuon +[01] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[1-9]")
    message(FATAL_ERROR "no NS time in the simulation")
  endif()
endif()

execute_process(
  COMMAND ${MPIEXEC} --oversubscribe ${NPFLAG} 2 ${CALIBRATE} --processors 1 --repeats 2
          -o ${WORK}/oversubscribed.toml
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dmuon-calibrate with --processors 1 exited with ${rc}: ${out}${err}")
endif()
file(READ ${WORK}/oversubscribed.toml text)
foreach(expected "\nprocessors_per_node = 1 " "\noversubscribed_latency = [0-9]"
                 "measured on the first 1 rank")
  if(NOT text MATCHES "${expected}")
    message(FATAL_ERROR "the oversubscribed description has no '${expected}':\n${text}")
  endif()
endforeach()
execute_process(COMMAND ${DMUON_PLAN} ${WORK}/plan.bin --simulate=${WORK}/oversubscribed.toml
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "each computes at 0.5 of its device's rates")
  message(FATAL_ERROR "dmuon-plan --simulate refused or misread the oversubscribed description")
endif()
