# ctest step_bench_smoke: runs dmuon_step_bench briefly on 2 ranks, on the
# GPT and on the Llama-shaped model, and fails unless it exits 0 and its
# report has every variant and the ratios.
# -DMPIEXEC -DNPFLAG -DBENCH -DWORK come from bench/step/CMakeLists.txt.
foreach(model gpt llama-shaped)
  execute_process(
    COMMAND ${MPIEXEC} --oversubscribe ${NPFLAG} 2 ${BENCH} --model ${model} --layers 2
            --warmup 1 --steps 2 --rounds 2 --work ${WORK}-${model} --expect-agree 1e-4
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dmuon_step_bench --model ${model} exited with ${rc}")
  endif()
  foreach(expected "adamw/dmuon " "muon/dmuon " "BASELINE 1 all-reduce \\+ NS all"
                   "BASELINE 2 ZeRO-1 gather \\+ NS all" "ratios:"
                   "muon/dmuon opt step / baseline 2 opt step" "fastest muon/dmuon ")
    if(NOT out MATCHES "${expected}")
      message(FATAL_ERROR "the ${model} report has no '${expected}'")
    endif()
  endforeach()
endforeach()
