/* A host with no MPI of its own (a torchrun launch at world size 1, a plain
 * process) creates an MPI-backend runtime with a null options.communicator:
 * the runtime initializes MPI itself (a singleton) and runs on MPI_COMM_SELF.
 * This program never calls MPI_Init; it checks that create works, that MPI is
 * initialized afterwards, that one step runs, and that a plan for more ranks
 * is refused naming the world sizes. ctest runtime_self_mpi (no mpirun). */
#include "dmuon/dmuon.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static void check(int ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok)
    ++failures;
}

static dmuon_plan_t load(const char *path) {
  dmuon_plan_t plan = NULL;
  if (dmuon_plan_load_file(path, &plan) != DMUON_SUCCESS) {
    fprintf(stderr, "cannot load %s: %s\n", path, dmuon_last_error());
    exit(2);
  }
  return plan;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s tiny-1.plan tiny-4.plan\n", argv[0]);
    return 2;
  }
  int initialized = 1;
  MPI_Initialized(&initialized);
  check(!initialized, "MPI is not initialized before the runtime");

  dmuon_plan_t plan = load(argv[1]);
  dmuon_runtime_options_t o;
  dmuon_runtime_options_init(&o);
  o.backend = DMUON_BACKEND_MPI;
  o.communicator = NULL; /* this process alone */
  dmuon_runtime_t rt = NULL;
  dmuon_status_t st = dmuon_runtime_create(plan, &o, &rt);
  check(st == DMUON_SUCCESS, "create with a null communicator on a 1-rank plan");
  if (st != DMUON_SUCCESS) {
    fprintf(stderr, "  %s\n", dmuon_last_error());
    return 1;
  }
  MPI_Initialized(&initialized);
  check(initialized, "the runtime initialized MPI");

  /* One step over every param and hook group: binds, hooks, step. */
  int64_t n = dmuon_plan_num_params(plan);
  int ok = 1;
  for (int64_t i = 0; i < n && ok; ++i) {
    dmuon_param_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    info.version = DMUON_PARAM_INFO_VERSION;
    ok = dmuon_plan_param_info(plan, (int)i, &info) == DMUON_SUCCESS;
    float *values = ok ? calloc((size_t)info.numel, sizeof(float)) : NULL;
    ok = ok && values && dmuon_runtime_bind_param(rt, info.name, values, info.numel) == DMUON_SUCCESS;
    free(values);
  }
  int groups = dmuon_plan_num_hook_groups(plan);
  for (int g = 0; g < groups && ok; ++g)
    ok = dmuon_runtime_pre_forward(rt, g) == DMUON_SUCCESS &&
         dmuon_runtime_post_forward(rt, g) == DMUON_SUCCESS;
  for (int g = groups - 1; g >= 0 && ok; --g)
    ok = dmuon_runtime_pre_backward(rt, g) == DMUON_SUCCESS &&
         dmuon_runtime_post_backward(rt, g) == DMUON_SUCCESS;
  ok = ok && dmuon_runtime_step(rt) == DMUON_SUCCESS;
  if (!ok)
    fprintf(stderr, "  %s\n", dmuon_runtime_last_error(rt));
  check(ok, "bind, every hook and a step on MPI_COMM_SELF");
  dmuon_runtime_destroy(rt);
  dmuon_plan_destroy(plan);

  /* A plan for 4 ranks: this process alone is one. */
  plan = load(argv[2]);
  rt = NULL;
  st = dmuon_runtime_create(plan, &o, &rt);
  const char *message = dmuon_last_error();
  check(st == DMUON_ERROR_MISMATCH && rt == NULL, "a 4-rank plan on a null communicator is refused");
  printf("     (%s)\n", message);
  check(strstr(message, "plan for 4 ranks") != NULL && strstr(message, "has 1 ranks") != NULL,
        "the refusal names both world sizes");
  dmuon_plan_destroy(plan);
  /* No MPI_Finalize here: the runtime registered its own at exit. */
  return failures ? 1 : 0;
}
