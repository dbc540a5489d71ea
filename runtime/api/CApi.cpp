// The C ABI of include/dmuon/dmuon.h over the executor. Nothing here throws
// across the boundary: every failure becomes a status and a message.
#include "dmuon/dmuon.h"
#include "common/ParamNames.h"
#include "common/Routes.h"

#include "backends/mpi/MpiBackend.h"
#include "core/Executor.h"
#include "core/LoadedPlan.h"
#include "core/ParamSlice.h"
#include "devices/CpuDevice.h"
#include "plugins/NcclPlugin.h"
#include "plan/PlanFile.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>

using dmuon::rt::Executor;
using dmuon::rt::LoadedPlan;
using dmuon::rt::Status;

// A plan is shared by its handle and every runtime made from it: the host
// may destroy its handle first.
struct dmuon_plan {
  std::shared_ptr<const LoadedPlan> plan;
};

struct dmuon_runtime {
  std::shared_ptr<const LoadedPlan> plan; // outlives the executor (declared first)
  std::unique_ptr<Executor> executor;
  std::string lastError;
};

namespace {

thread_local std::string tlsLastError;

dmuon_status_t report(dmuon_runtime *rt, const Status &s) {
  if (!s.isOk() && s.code() != DMUON_STEP_SKIPPED) { // a skipped step is no error
    tlsLastError = s.message();
    if (rt)
      rt->lastError = s.message();
  }
  return s.code();
}

template <typename F> dmuon_status_t guarded(dmuon_runtime *rt, F &&body) {
  try {
    return report(rt, body());
  } catch (const std::bad_alloc &) {
    return report(rt, Status(DMUON_ERROR_OUT_OF_MEMORY, "out of host memory"));
  } catch (const std::exception &e) {
    return report(rt, Status(DMUON_ERROR_INTERNAL, std::string("internal error: ") + e.what()));
  }
}

Status requireRuntime(dmuon_runtime *rt) {
  if (!rt || !rt->executor)
    return dmuon::rt::invalidArgument("runtime handle is null");
  return Status::ok();
}

// A name longer than any the plan allows cannot match one; say so without
// reading past the limit.
Status requireName(const char *name) {
  if (!name)
    return dmuon::rt::invalidArgument("param name is null");
  const size_t n = ::strnlen(name, dmuon::common::kMaxParamNameBytes + 1);
  if (n > dmuon::common::kMaxParamNameBytes)
    return dmuon::rt::invalidArgument("param name '" +
                                      dmuon::common::printableName(std::string_view(name, n)) +
                                      "' is longer than " +
                                      std::to_string(dmuon::common::kMaxParamNameBytes) +
                                      " bytes; " + dmuon::common::paramNameRuleText());
  return Status::ok();
}

// Output and input structs carry their size and version like the options.
// Every version so far is the struct's first, so a smaller struct_size is
// not one of ours.
template <typename T> Status checkStruct(const T *s, uint32_t newest, const char *what) {
  if (!s)
    return dmuon::rt::invalidArgument(std::string(what) + " is null");
  if (s->version < 1 || s->version > newest || s->struct_size < sizeof(T))
    return dmuon::rt::invalidArgument(std::string(what) + " has struct_size " +
                                      std::to_string(s->struct_size) + " and version " +
                                      std::to_string(s->version) + "; set them to sizeof and " +
                                      std::to_string(newest));
  return Status::ok();
}

// Writes `value` to a checked output struct, keeping the caller's header.
template <typename T> void fillOut(T *out, T value) {
  value.struct_size = out->struct_size;
  value.version = out->version;
  *out = value;
}

Status checkParamIndex(const LoadedPlan &plan, int index) {
  if (index < 0 || index >= plan.numParams())
    return dmuon::rt::invalidArgument("param index " + std::to_string(index) +
                                      " is out of range (the plan has " +
                                      std::to_string(plan.numParams()) + ")");
  return Status::ok();
}

// Two of the executor's counters, `get(executor, a, b)`; either output may be null.
template <typename Get>
dmuon_status_t twoCounts(dmuon_runtime *rt, int64_t *outA, int64_t *outB, Get get) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    int64_t a = 0, b = 0;
    get(*rt->executor, a, b);
    if (outA)
      *outA = a;
    if (outB)
      *outB = b;
    return Status::ok();
  });
}

} // namespace

extern "C" {

const char *dmuon_status_string(dmuon_status_t status) {
  switch (status) {
  case DMUON_SUCCESS:
    return "success";
  case DMUON_ERROR_INVALID_ARGUMENT:
    return "invalid argument";
  case DMUON_ERROR_INVALID_PLAN:
    return "invalid plan";
  case DMUON_ERROR_MISMATCH:
    return "plan does not match the communicator";
  case DMUON_ERROR_INVALID_STATE:
    return "call out of order";
  case DMUON_ERROR_UNSUPPORTED:
    return "unsupported";
  case DMUON_ERROR_BACKEND:
    return "backend error";
  case DMUON_ERROR_OUT_OF_MEMORY:
    return "out of memory";
  case DMUON_ERROR_IO:
    return "I/O error";
  case DMUON_ERROR_INTERNAL:
    return "internal error";
  case DMUON_STEP_SKIPPED:
    return "step skipped (non-finite gradient)";
  }
  return "unknown status";
}

const char *dmuon_last_error(void) { return tlsLastError.c_str(); }

void dmuon_version(int *major, int *minor, int *patch) {
  if (major)
    *major = DMUON_VERSION_MAJOR;
  if (minor)
    *minor = DMUON_VERSION_MINOR;
  if (patch)
    *patch = DMUON_VERSION_PATCH;
}

// ------------------------------------------------------------------ plans

static dmuon_status_t loadBytes(std::vector<uint8_t> bytes, const std::string &what,
                                dmuon_plan_t *out) {
  std::unique_ptr<LoadedPlan> plan;
  Status s = LoadedPlan::create(std::move(bytes), plan);
  if (!s.isOk())
    return report(nullptr, Status(s.code(), what + ": " + s.message()));
  *out = new dmuon_plan{std::move(plan)};
  return DMUON_SUCCESS;
}

dmuon_status_t dmuon_plan_load_file(const char *path, dmuon_plan_t *out_plan) {
  return guarded(nullptr, [&]() -> Status {
    if (!path || !out_plan)
      return dmuon::rt::invalidArgument("dmuon_plan_load_file: path or out_plan is null");
    *out_plan = nullptr;
    std::vector<uint8_t> bytes;
    std::string err = dmuon::planfile::readFile(path, bytes);
    if (!err.empty())
      return Status(DMUON_ERROR_IO, std::string("'") + path + "': " + err);
    dmuon_status_t st = loadBytes(std::move(bytes), std::string("'") + path + "'", out_plan);
    return st == DMUON_SUCCESS ? Status::ok() : Status(st, tlsLastError);
  });
}

dmuon_status_t dmuon_plan_load_buffer(const void *data, size_t size, dmuon_plan_t *out_plan) {
  return guarded(nullptr, [&]() -> Status {
    if (!data || !out_plan)
      return dmuon::rt::invalidArgument("dmuon_plan_load_buffer: data or out_plan is null");
    *out_plan = nullptr;
    const auto *p = static_cast<const uint8_t *>(data);
    dmuon_status_t st = loadBytes(std::vector<uint8_t>(p, p + size), "plan buffer", out_plan);
    return st == DMUON_SUCCESS ? Status::ok() : Status(st, tlsLastError);
  });
}

void dmuon_plan_destroy(dmuon_plan_t plan) { delete plan; }

uint64_t dmuon_plan_fingerprint(dmuon_plan_t plan) {
  return plan ? plan->plan->fingerprint() : 0;
}
int dmuon_plan_world_size(dmuon_plan_t plan) { return plan ? plan->plan->worldSize() : 0; }
int dmuon_plan_num_params(dmuon_plan_t plan) { return plan ? plan->plan->numParams() : 0; }
int dmuon_plan_num_hook_groups(dmuon_plan_t plan) {
  if (!plan || !plan->plan->root().hook_groups())
    return 0;
  return static_cast<int>(plan->plan->root().hook_groups()->size());
}
const char *dmuon_plan_hook_group_name(dmuon_plan_t plan, int index) {
  if (index < 0 || index >= dmuon_plan_num_hook_groups(plan))
    return nullptr;
  return plan->plan->root().hook_groups()->Get(index)->name()->c_str();
}

dmuon_status_t dmuon_plan_param_info(dmuon_plan_t plan, int index, dmuon_param_info_t *out) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan)
      return dmuon::rt::invalidArgument("dmuon_plan_param_info: plan is null");
    DMUON_RETURN_IF_ERROR(checkStruct(out, DMUON_PARAM_INFO_VERSION, "param_info: out_info"));
    DMUON_RETURN_IF_ERROR(checkParamIndex(*plan->plan, index));
    const dmuon::plan::Param &p = plan->plan->param(index);
    if (p.shape()->size() > DMUON_MAX_DIMS)
      return dmuon::rt::unsupported("param '" + p.name()->str() + "' has more than " +
                                    std::to_string(DMUON_MAX_DIMS) + " dims");
    dmuon_param_info_t info{};
    info.name = p.name()->c_str();
    info.ndim = static_cast<int>(p.shape()->size());
    info.numel = 1;
    for (int d = 0; d < info.ndim; ++d) {
      info.shape[d] = p.shape()->Get(d);
      info.numel *= info.shape[d];
    }
    info.dtype = static_cast<dmuon_dtype_t>(p.dtype());
    info.role = p.role() == dmuon::plan::Role::muon ? DMUON_ROLE_MUON : DMUON_ROLE_ADAMW;
    info.hook_group = p.hook_group();
    info.owner_rank = p.owner_rank();
    info.owner_shard = p.owner_shard();
    info.owner_replicate = p.owner_replicate();
    fillOut(out, info);
    return Status::ok();
  });
}

dmuon_status_t dmuon_plan_param_route(dmuon_plan_t plan, int index, dmuon_param_route_t *out) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan)
      return dmuon::rt::invalidArgument("dmuon_plan_param_route: plan is null");
    DMUON_RETURN_IF_ERROR(checkStruct(out, DMUON_PARAM_ROUTE_VERSION, "param_route: out_route"));
    DMUON_RETURN_IF_ERROR(checkParamIndex(*plan->plan, index));
    const dmuon::plan::Param &p = plan->plan->param(index);
    const dmuon::plan::Route route = dmuon::common::effectiveRoute(p);
    out->route = static_cast<dmuon_route_t>(route);
    out->shard_elements = route == dmuon::plan::Route::sharded ? p.shard_elements() : 0;
    return Status::ok();
  });
}

dmuon_status_t dmuon_plan_param_slice(dmuon_plan_t plan, int index, int rank,
                                      dmuon_param_slice_t *out) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan)
      return dmuon::rt::invalidArgument("dmuon_plan_param_slice: plan is null");
    DMUON_RETURN_IF_ERROR(checkStruct(out, DMUON_PARAM_SLICE_VERSION, "param_slice: out_slice"));
    DMUON_RETURN_IF_ERROR(checkParamIndex(*plan->plan, index));
    if (rank < 0 || rank >= plan->plan->worldSize())
      return dmuon::rt::invalidArgument("rank " + std::to_string(rank) +
                                        " is out of range (the plan has " +
                                        std::to_string(plan->plan->worldSize()) + " ranks)");
    return dmuon::rt::paramSlice(plan->plan->root(), index, rank, *out);
  });
}

dmuon_status_t dmuon_plan_mesh(dmuon_plan_t plan, dmuon_mesh_info_t *out) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan)
      return dmuon::rt::invalidArgument("dmuon_plan_mesh: plan is null");
    DMUON_RETURN_IF_ERROR(checkStruct(out, DMUON_MESH_INFO_VERSION, "plan_mesh: out_mesh"));
    const dmuon::plan::Mesh &m = *plan->plan->root().mesh();
    if (m.dims()->size() > DMUON_MAX_MESH_DIMS)
      return dmuon::rt::unsupported("the plan's mesh has more than " +
                                    std::to_string(DMUON_MAX_MESH_DIMS) + " dims");
    dmuon_mesh_info_t mesh{};
    mesh.ndim = static_cast<int>(m.dims()->size());
    for (int d = 0; d < mesh.ndim; ++d) {
      mesh.dim_names[d] = m.dims()->Get(d)->name()->c_str();
      mesh.dim_sizes[d] = m.dims()->Get(d)->size();
      mesh.dim_carries_data[d] = m.dims()->Get(d)->carries_data();
    }
    mesh.shard_dim = m.shard_dim();
    mesh.replicate_dim = m.replicate_dim();
    mesh.num_shards = m.num_shards();
    mesh.num_replicas = m.num_replicas();
    mesh.world_size = m.world_size();
    mesh.data_parallel_size = m.data_parallel_size() > 0
                                  ? m.data_parallel_size()
                                  : int64_t(m.num_shards()) * m.num_replicas();
    fillOut(out, mesh);
    return Status::ok();
  });
}

dmuon_status_t dmuon_plan_find_param(dmuon_plan_t plan, const char *name, int *out_index) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan || !name || !out_index)
      return dmuon::rt::invalidArgument("dmuon_plan_find_param: null argument");
    *out_index = plan->plan->findParam(name);
    if (*out_index < 0)
      return dmuon::rt::invalidArgument(std::string("the plan has no param named '") + name + "'");
    return Status::ok();
  });
}

// ---------------------------------------------------------------- runtime

void dmuon_runtime_options_init(dmuon_runtime_options_t *o) {
  if (!o)
    return;
  std::memset(o, 0, sizeof *o);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  o->struct_size = sizeof *o;
  o->version = DMUON_RUNTIME_OPTIONS_VERSION;
  o->backend = DMUON_BACKEND_MPI;
  o->device = -1; // NCCL: the communicator's device
  o->mode = DMUON_MODE_FROM_PLAN;
  o->replicate_async = -1;
  o->manage_adamw = 1;
  o->lr = o->momentum = o->weight_decay = nan;
  o->nesterov = -1;
  o->ns_steps = -1;
  o->adamw_lr = o->adamw_beta1 = o->adamw_beta2 = o->adamw_eps = o->adamw_weight_decay = nan;
  o->accumulation = DMUON_ACCUMULATION_LOCAL;
  o->max_grad_norm = 0;
  o->clip_policy = DMUON_CLIP_ADAMW_ONLY;
  o->momentum_form = DMUON_MOMENTUM_SGD;
}

// The size of each version of the options struct: fields are only appended.
static size_t optionsSize(uint32_t version) {
  return version == 1 ? offsetof(dmuon_runtime_options_t, accumulation)
                      : sizeof(dmuon_runtime_options_t);
}

dmuon_status_t dmuon_runtime_create(dmuon_plan_t plan, const dmuon_runtime_options_t *given,
                                    dmuon_runtime_t *out_runtime) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan || !given || !out_runtime)
      return dmuon::rt::invalidArgument("dmuon_runtime_create: plan, options or out_runtime is null");
    *out_runtime = nullptr;
    if (given->version > DMUON_RUNTIME_OPTIONS_VERSION)
      return dmuon::rt::invalidArgument(
          "options.version " + std::to_string(given->version) +
          " is newer than this library's (" + std::to_string(DMUON_RUNTIME_OPTIONS_VERSION) + ")");
    if (given->version < 1 || given->struct_size < optionsSize(given->version))
      return dmuon::rt::invalidArgument(
          "options are not initialized (struct_size " + std::to_string(given->struct_size) +
          ", version " + std::to_string(given->version) +
          "); call dmuon_runtime_options_init first");
    // An older struct: its fields over this version's defaults.
    dmuon_runtime_options_t resolved;
    dmuon_runtime_options_init(&resolved);
    std::memcpy(&resolved, given, optionsSize(given->version));
    const dmuon_runtime_options_t *options = &resolved;
    if (!(options->collective_timeout_s >= 0))
      return dmuon::rt::invalidArgument("options.collective_timeout_s must be >= 0 (0: no timeout)");
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

#define DMUON_RUNTIME_CALL(rt, expr)                                                       \
  guarded(rt, [&]() -> Status {                                                            \
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));                                             \
    return expr;                                                                           \
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
dmuon_status_t dmuon_runtime_synchronize(dmuon_runtime_t rt) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->synchronize());
}

dmuon_status_t dmuon_runtime_begin_micro_batch(dmuon_runtime_t rt, int is_last) {
  return DMUON_RUNTIME_CALL(rt, rt->executor->beginMicroBatch(is_last != 0));
}

void dmuon_hyper_params_init(dmuon_hyper_params_t *p) {
  if (!p)
    return;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  *p = {};
  p->struct_size = sizeof *p;
  p->version = DMUON_HYPER_PARAMS_VERSION;
  p->lr = p->momentum = p->weight_decay = p->adamw_lr = p->adamw_weight_decay = nan;
}

dmuon_status_t dmuon_runtime_set_hyper_params(dmuon_runtime_t rt, const dmuon_hyper_params_t *p) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(checkStruct(p, DMUON_HYPER_PARAMS_VERSION, "set_hyper_params: params"));
    return rt->executor->setHyperParams(*p);
  });
}

dmuon_status_t dmuon_runtime_get_hyper_params(dmuon_runtime_t rt, dmuon_hyper_params_t *out) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    DMUON_RETURN_IF_ERROR(checkStruct(out, DMUON_HYPER_PARAMS_VERSION, "get_hyper_params: out"));
    rt->executor->hyperParams(*out);
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

// ---------------------------------------------------------------- QK-Clip

int dmuon_plan_num_qk_clip_pairs(dmuon_plan_t plan) {
  if (!plan || !plan->plan->root().qk_clip())
    return 0;
  return static_cast<int>(plan->plan->root().qk_clip()->size());
}

dmuon_status_t dmuon_plan_qk_clip_pair(dmuon_plan_t plan, int index,
                                       dmuon_qk_clip_pair_info_t *out) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan)
      return dmuon::rt::invalidArgument("dmuon_plan_qk_clip_pair: plan is null");
    DMUON_RETURN_IF_ERROR(
        checkStruct(out, DMUON_QK_CLIP_PAIR_INFO_VERSION, "qk_clip_pair: out_info"));
    const int n = dmuon_plan_num_qk_clip_pairs(plan);
    if (index < 0 || index >= n)
      return dmuon::rt::invalidArgument("qk_clip pair " + std::to_string(index) +
                                        " is out of range (the plan has " + std::to_string(n) +
                                        ")");
    const dmuon::plan::QkClipPair &q = *plan->plan->root().qk_clip()->Get(index);
    dmuon_qk_clip_pair_info_t info{};
    info.query = plan->plan->param(q.query()).name()->c_str();
    info.key = plan->plan->param(q.key()).name()->c_str();
    info.query_index = q.query();
    info.key_index = q.key();
    info.heads = q.heads();
    info.key_heads = q.key_heads();
    info.head_dim = q.head_dim();
    fillOut(out, info);
    return Status::ok();
  });
}

double dmuon_plan_qk_clip_tau(dmuon_plan_t plan) {
  return plan ? plan->plan->root().options()->qk_clip_tau() : 0.0;
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
