// The C ABI of include/dmuon/dmuon.h, part one: status strings, the
// version, and plans (loading, params, mesh, QK-Clip pairs).
#include "CApiSupport.h"

#include "common/PlanRules.h"
#include "common/Routes.h"
#include "core/ParamSlice.h"
#include "core/Topology.h"
#include "dmuon/plan_version.h"
#include "plan/PlanFile.h"

#include <cstring>
#include <string>
#include <vector>

// A verified plan's shapes fit the C ABI's arrays.
static_assert(DMUON_MAX_DIMS == dmuon::common::kMaxParamDims);

using dmuon::rt::Executor;
using dmuon::rt::LoadedPlan;
using dmuon::rt::Status;
using namespace dmuon::capi;

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
  case DMUON_ERROR_NON_FINITE:
    return "non-finite update";
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

void dmuon_plan_format_version(int *major, int *minor) {
  if (major)
    *major = DMUON_PLAN_FORMAT_MAJOR;
  if (minor)
    *minor = DMUON_PLAN_FORMAT_MINOR;
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

int dmuon_plan_num_stages(dmuon_plan_t plan) {
  if (!plan)
    return 0;
  const dmuon::plan::Mesh *mesh = plan->plan->root().mesh();
  return mesh && mesh->stage_dim() >= 0 ? mesh->num_stages() : 1;
}

dmuon_status_t dmuon_plan_rank_stage(dmuon_plan_t plan, int rank, int *out_stage) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan || !out_stage)
      return dmuon::rt::invalidArgument("dmuon_plan_rank_stage: plan or out_stage is null");
    const dmuon::plan::Mesh &mesh = *plan->plan->root().mesh();
    if (rank < 0 || rank >= mesh.world_size())
      return dmuon::rt::invalidArgument("rank " + std::to_string(rank) +
                                        " is out of range (the plan's world has " +
                                        std::to_string(mesh.world_size()) + " ranks)");
    // The executor's own rule for its rank.
    *out_stage = dmuon::rt::Topology::of(plan->plan->root(), rank).stage;
    return Status::ok();
  });
}

dmuon_status_t dmuon_plan_param_stage(dmuon_plan_t plan, int index, int *out_stage) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan || !out_stage)
      return dmuon::rt::invalidArgument("dmuon_plan_param_stage: plan or out_stage is null");
    DMUON_RETURN_IF_ERROR(checkParamIndex(*plan->plan, index));
    *out_stage = plan->plan->param(index).pipeline_stage();
    return Status::ok();
  });
}

dmuon_status_t dmuon_plan_hook_group_stage(dmuon_plan_t plan, int index, int *out_stage) {
  return guarded(nullptr, [&]() -> Status {
    if (!plan || !out_stage)
      return dmuon::rt::invalidArgument("dmuon_plan_hook_group_stage: plan or out_stage is null");
    const int groups = dmuon_plan_num_hook_groups(plan);
    if (index < 0 || index >= groups)
      return dmuon::rt::invalidArgument("hook group index " + std::to_string(index) +
                                        " is out of range (the plan has " +
                                        std::to_string(groups) + ")");
    *out_stage = plan->plan->root().hook_groups()->Get(index)->pipeline_stage();
    return Status::ok();
  });
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

} // extern "C"
