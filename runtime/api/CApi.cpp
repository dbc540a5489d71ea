// The C ABI of include/dmuon/dmuon.h, part two: runtimes over the executor
// (creation, hooks, steps, state, counters, QK-Clip). Nothing here throws
// across the boundary: every failure becomes a status and a message.
#include "CApiSupport.h"

#include "common/Routes.h"

#include "backends/mpi/MpiBackend.h"
#include "core/ParamSlice.h"
#include "devices/CpuDevice.h"
#include "plan/PlanFile.h"
#include "plugins/NcclPlugin.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

using dmuon::rt::Executor;
using dmuon::rt::LoadedPlan;
using dmuon::rt::Status;
using namespace dmuon::capi;

extern "C" {

// ---------------------------------------------------------------- runtime

void dmuon_runtime_options_init(dmuon_runtime_options_t *o) {
  if (!o)
    return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->version = DMUON_RUNTIME_OPTIONS_VERSION;
  o->backend = DMUON_BACKEND_MPI;
  o->device = DMUON_UNSET; // NCCL: the communicator's device
  o->mode = DMUON_MODE_FROM_PLAN;
  o->replicate_async = DMUON_UNSET;
  o->manage_adamw = 1;
  // Unset: the plan's value, for every real-valued hyper-parameter.
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  o->name = DMUON_UNSET_REAL;
#define DMUON_HYPER_FIXED DMUON_HYPER_SCHEDULED
#include "common/HyperParams.def"
  o->nesterov = DMUON_UNSET;
  o->ns_steps = DMUON_UNSET;
  o->accumulation = DMUON_ACCUMULATION_LOCAL;
  o->max_grad_norm = 0;
  o->clip_policy = DMUON_CLIP_ADAMW_ONLY;
  o->momentum_form = DMUON_MOMENTUM_SGD;
}

// The size of each version of the options struct: fields are only appended.
static size_t optionsSize(uint32_t version) {
  return version == 1   ? offsetof(dmuon_runtime_options_t, accumulation)
         : version == 2 ? offsetof(dmuon_runtime_options_t, normuon_beta2)
         : version == 3 ? offsetof(dmuon_runtime_options_t, soap_lr)
                        : sizeof(dmuon_runtime_options_t);
}

dmuon_status_t dmuon_runtime_create(dmuon_plan_t plan, const dmuon_runtime_options_t *given,
                                    dmuon_runtime_t *out_runtime) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan || !given || !out_runtime)
      return dmuon::rt::invalidArgument(
          "dmuon_runtime_create: plan, options or out_runtime is null");
    *out_runtime = nullptr;
    if (given->version > DMUON_RUNTIME_OPTIONS_VERSION)
      return dmuon::rt::invalidArgument("options.version " + std::to_string(given->version) +
                                        " is newer than this library's (" +
                                        std::to_string(DMUON_RUNTIME_OPTIONS_VERSION) + ")");
    if (given->version < 1 || given->struct_size < optionsSize(given->version))
      return dmuon::rt::invalidArgument("options are not initialized (struct_size " +
                                        std::to_string(given->struct_size) + ", version " +
                                        std::to_string(given->version) +
                                        "); call dmuon_runtime_options_init first");
    // An older struct: its fields over this version's defaults.
    dmuon_runtime_options_t resolved;
    dmuon_runtime_options_init(&resolved);
    std::memcpy(&resolved, given, optionsSize(given->version));
    const dmuon_runtime_options_t *options = &resolved;
    if (!(options->collective_timeout_s >= 0))
      return dmuon::rt::invalidArgument(
          "options.collective_timeout_s must be >= 0 (0: no timeout)");
    if (options->mode != DMUON_MODE_FROM_PLAN && options->mode != DMUON_MODE_Z2 &&
        options->mode != DMUON_MODE_Z3)
      return dmuon::rt::invalidArgument("options.mode " + std::to_string(options->mode) +
                                        " is not a dmuon_mode_t");
    std::unique_ptr<dmuon::rt::Backend> backend;
    std::unique_ptr<dmuon::rt::Device> device;
    switch (options->backend) {
    case DMUON_BACKEND_MPI:
      DMUON_RETURN_IF_ERROR(dmuon::rt::createMpiBackend(options->communicator, backend));
      device = dmuon::rt::createCpuDevice();
      break;
    case DMUON_BACKEND_NCCL:
      DMUON_RETURN_IF_ERROR(dmuon::rt::createNcclFromPlugin(*options, backend, device));
      break;
    default:
      return dmuon::rt::invalidArgument("options.backend " + std::to_string(options->backend) +
                                        " is not a dmuon_backend_t");
    }
    backend->setTimeout(options->collective_timeout_s);
    std::unique_ptr<Executor> ex;
    DMUON_RETURN_IF_ERROR(
        Executor::create(*plan->plan, *options, std::move(backend), std::move(device), ex));
    *out_runtime = new dmuon_runtime{plan->plan, std::move(ex), {}};
    return Status::ok();
  });
}

void dmuon_runtime_destroy(dmuon_runtime_t rt) { delete rt; }

const char *dmuon_runtime_last_error(dmuon_runtime_t rt) {
  return rt ? rt->lastError.c_str() : dmuon_last_error();
}

#define DMUON_RUNTIME_CALL(rt, expr)                                                               \
  guarded(rt, [&]() -> Status {                                                                    \
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));                                                     \
    return expr;                                                                                   \
  })

dmuon_status_t dmuon_runtime_bind_param(dmuon_runtime_t rt, const char *name, const float *values,
                                        int64_t numel) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(requireName(name));
    return rt->executor->bindParam(name, values, numel);
  });
}

dmuon_status_t dmuon_runtime_param_view(dmuon_runtime_t rt, int param, void **out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(checkParamIndex(*rt->plan, param));
    if (!out)
      return dmuon::rt::invalidArgument("param_view: out_data is null");
    return rt->executor->paramView(param, out);
  });
}

dmuon_status_t dmuon_runtime_grad_view(dmuon_runtime_t rt, int param, float **out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(checkParamIndex(*rt->plan, param));
    if (!out)
      return dmuon::rt::invalidArgument("grad_view: out_grad is null");
    return rt->executor->gradView(param, out);
  });
}

dmuon_status_t dmuon_runtime_pre_forward(dmuon_runtime_t rt, int g) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->preForward(g));
}
dmuon_status_t dmuon_runtime_post_forward(dmuon_runtime_t rt, int g) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->postForward(g));
}
dmuon_status_t dmuon_runtime_pre_backward(dmuon_runtime_t rt, int g) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->preBackward(g));
}
dmuon_status_t dmuon_runtime_post_backward(dmuon_runtime_t rt, int g) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->postBackward(g));
}
dmuon_status_t dmuon_runtime_finish_backward(dmuon_runtime_t rt) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->finishBackward());
}
dmuon_status_t dmuon_runtime_step(dmuon_runtime_t rt) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->step());
}
dmuon_status_t dmuon_runtime_abandon_step(dmuon_runtime_t rt) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->abandonStep());
}
dmuon_status_t dmuon_runtime_synchronize(dmuon_runtime_t rt) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->synchronize());
}

dmuon_status_t dmuon_runtime_begin_micro_batch(dmuon_runtime_t rt, int is_last) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->beginMicroBatch(is_last != 0));
}

void dmuon_hyper_params_init(dmuon_hyper_params_t *p) {
  if (!p)
    return;
  *p = {};
  p->struct_size = sizeof *p;
  p->version = DMUON_HYPER_PARAMS_VERSION;
#define DMUON_HYPER_SCHEDULED(name, camel, group, field, def, range, flag, help)                   \
  p->name = DMUON_UNSET_REAL;
#include "common/HyperParams.def"
}

// The size of each version of dmuon_hyper_params_t: fields are only appended.
static size_t hyperParamsSize(uint32_t version) {
  return version == 1 ? offsetof(dmuon_hyper_params_t, soap_lr) : sizeof(dmuon_hyper_params_t);
}

dmuon_status_t dmuon_runtime_set_hyper_params(dmuon_runtime_t rt, const dmuon_hyper_params_t *p) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(checkStruct(p, DMUON_HYPER_PARAMS_VERSION, "set_hyper_params: params",
                                      hyperParamsSize, "dmuon_hyper_params_init"));
    // An older struct's fields over unset ones: what it cannot name stays.
    dmuon_hyper_params_t h;
    dmuon_hyper_params_init(&h);
    std::memcpy(&h, p, hyperParamsSize(p->version));
    return rt->executor->setHyperParams(h);
  });
}

dmuon_status_t dmuon_runtime_get_hyper_params(dmuon_runtime_t rt, dmuon_hyper_params_t *out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(checkStruct(out, DMUON_HYPER_PARAMS_VERSION, "get_hyper_params: out",
                                      hyperParamsSize, "dmuon_hyper_params_init"));
    dmuon_hyper_params_t h;
    dmuon_hyper_params_init(&h);
    rt->executor->hyperParams(h);
    const size_t size = out->struct_size, version = out->version;
    std::memcpy(out, &h, hyperParamsSize(out->version));
    out->struct_size = size;
    out->version = static_cast<uint32_t>(version);
    return Status::ok();
  });
}

dmuon_status_t dmuon_runtime_set_param_group_scale(dmuon_runtime_t rt, const char *pattern,
                                                   double lr_scale, double weight_decay_scale) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    if (!pattern)
      return dmuon::rt::invalidArgument("set_param_group_scale: pattern is null");
    return rt->executor->setParamGroupScale(pattern, lr_scale, weight_decay_scale);
  });
}

dmuon_status_t dmuon_runtime_grad_norm(dmuon_runtime_t rt, dmuon_grad_norm_t *out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(checkStruct(out, DMUON_GRAD_NORM_VERSION, "grad_norm: out_norm"));
    return rt->executor->gradNorm(*out);
  });
}

dmuon_status_t dmuon_runtime_memory(dmuon_runtime_t rt, dmuon_memory_report_t *out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(checkStruct(out, DMUON_MEMORY_REPORT_VERSION, "memory: out_report"));
    rt->executor->memory(*out);
    return Status::ok();
  });
}

dmuon_status_t dmuon_runtime_planned_memory(dmuon_runtime_t rt, dmuon_memory_report_t *out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(
        checkStruct(out, DMUON_MEMORY_REPORT_VERSION, "planned_memory: out_report"));
    rt->executor->plannedMemory(*out);
    return Status::ok();
  });
}

dmuon_status_t dmuon_runtime_step_counts(dmuon_runtime_t rt, int64_t *applied, int64_t *skipped) {
  return twoCounts(rt, applied, skipped,
                   [](const Executor &e, int64_t &a, int64_t &s) { e.stepCounts(a, s); });
}

dmuon_status_t dmuon_runtime_gather_param(dmuon_runtime_t rt, const char *name, float *out,
                                          int64_t numel) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(requireName(name));
    return rt->executor->gatherParam(name, out, numel);
  });
}

dmuon_status_t dmuon_checkpoint_save(dmuon_runtime_t rt, const char *path, int64_t step) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    if (!path || !*path)
      return dmuon::rt::invalidArgument("checkpoint_save: path is empty");
    return rt->executor->saveCheckpoint(path, step);
  });
}

dmuon_status_t dmuon_checkpoint_load(dmuon_runtime_t rt, const char *path, int64_t *out_step) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    if (!path || !*path)
      return dmuon::rt::invalidArgument("checkpoint_load: path is empty");
    return rt->executor->loadCheckpoint(path, out_step);
  });
}

dmuon_status_t dmuon_runtime_param_state(dmuon_runtime_t rt, const char *name,
                                         dmuon_param_state_t *out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(requireName(name));
    DMUON_RETURN_IF_ERROR(checkStruct(out, DMUON_PARAM_STATE_VERSION, "param_state: out_state"));
    dmuon_param_state_t state{};
    DMUON_RETURN_IF_ERROR(rt->executor->paramState(name, state));
    fillOut(out, state);
    return Status::ok();
  });
}

dmuon_status_t dmuon_runtime_comm_counters(dmuon_runtime_t rt, dmuon_comm_counters_t *out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(
        checkStruct(out, DMUON_COMM_COUNTERS_VERSION, "comm_counters: out_counters"));
    fillOut(out, rt->executor->counters());
    return Status::ok();
  });
}

dmuon_status_t dmuon_runtime_reset_comm_counters(dmuon_runtime_t rt) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    rt->executor->resetCounters();
    return Status::ok();
  });
}

dmuon_status_t dmuon_runtime_planned_counters(dmuon_runtime_t rt, dmuon_comm_counters_t *out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(
        checkStruct(out, DMUON_COMM_COUNTERS_VERSION, "planned_counters: out_counters"));
    fillOut(out, rt->executor->plannedCounters());
    return Status::ok();
  });
}

double dmuon_runtime_ns_flops(dmuon_runtime_t rt) {
  return rt && rt->executor ? rt->executor->nsFlops() : 0.0;
}

dmuon_status_t dmuon_runtime_set_qk_max_logits(dmuon_runtime_t rt, int pair,
                                               const float *max_logits, int64_t count) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->setQkMaxLogits(pair, max_logits, count));
}

dmuon_status_t dmuon_runtime_qk_clip_counts(dmuon_runtime_t rt, int64_t *last_step,
                                            int64_t *total) {
  return twoCounts(rt, last_step, total,
                   [](const Executor &e, int64_t &l, int64_t &t) { e.qkClipCounts(l, t); });
}

} // extern "C"
