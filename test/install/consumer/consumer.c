/* Loads a plan through the installed C ABI and prints its fingerprint and
 * first param, read into a versioned output struct as dmuon.h shows. */
#include <dmuon/dmuon.h>

#include <inttypes.h>
#include <stdio.h>

int main(int argc, char **argv) {
  dmuon_plan_t plan = NULL;
  dmuon_status_t st;
  if (argc != 2) {
    fprintf(stderr, "usage: consumer_c PLAN\n");
    return 2;
  }
  st = dmuon_plan_load_file(argv[1], &plan);
  if (st != DMUON_SUCCESS) {
    fprintf(stderr, "consumer_c: %s: %s\n", dmuon_status_string(st), dmuon_last_error());
    return 1;
  }
  dmuon_param_info_t info = {.struct_size = sizeof info, .version = DMUON_PARAM_INFO_VERSION};
  st = dmuon_plan_param_info(plan, 0, &info);
  if (st != DMUON_SUCCESS) {
    fprintf(stderr, "consumer_c: param_info: %s: %s\n", dmuon_status_string(st),
            dmuon_last_error());
    dmuon_plan_destroy(plan);
    return 1;
  }
  printf("%s: fingerprint 0x%016" PRIx64 ", %d ranks, %d params, first %s\n", argv[1],
         dmuon_plan_fingerprint(plan), dmuon_plan_world_size(plan), dmuon_plan_num_params(plan),
         info.name);
  dmuon_plan_destroy(plan);
  return 0;
}
