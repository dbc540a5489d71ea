/* Prints sizeof of every versioned struct of dmuon.h, one "name size" a line:
 * test_binding.py compares them with the Python package's ctypes structs, so
 * a field added to the header and not to python/dmuon/_capi.py fails here. */
#include "dmuon/dmuon.h"

#include <stdio.h>

#define SIZE(T) printf("%s %zu\n", #T, sizeof(T))

int main(void) {
  SIZE(dmuon_mesh_info_t);
  SIZE(dmuon_param_info_t);
  SIZE(dmuon_param_route_t);
  SIZE(dmuon_param_slice_t);
  SIZE(dmuon_runtime_options_t);
  SIZE(dmuon_hyper_params_t);
  SIZE(dmuon_grad_norm_t);
  SIZE(dmuon_qk_clip_pair_info_t);
  SIZE(dmuon_param_state_t);
  SIZE(dmuon_comm_counters_t);
  SIZE(dmuon_memory_report_t);
  return 0;
}
