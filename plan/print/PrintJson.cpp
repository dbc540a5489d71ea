// The JSON form of a plan: a public interface (docs/plan-format.md), keys in
// a fixed order, fields the plan's stage has not computed left out.
#include "common/MatrixOptimizers.h"
#include "plan/print/JsonWriter.h"
#include "plan/print/PlanPrinter.h"
#include "plan/print/PrintCommon.h"
#include "plan/print/PrintQkClip.h"

namespace dmuon::planfile {

using namespace print;

namespace {

void jsonNames(Json &j, const View &v, const char *k, const flatbuffers::Vector<int32_t> *l) {
  j.key(k);
  j.beginArray();
  for (uint32_t i = 0; i < size(l); ++i)
    j.value(v.paramName(l->Get(i)));
  j.endArray();
}

// "k": [a, b, c], on one line.
template <typename T> void jsonInlineList(Json &j, const char *k, const flatbuffers::Vector<T> *l) {
  j.key(k);
  j.beginArray(true);
  for (uint32_t i = 0; i < size(l); ++i)
    j.value(l->Get(i));
  j.endArray();
}

void jsonSlot(Json &j, int64_t shard, int64_t replicate) {
  j.beginObject(true);
  j.field("shard", shard);
  j.field("replicate", replicate);
  j.endObject();
}

void jsonOptString(Json &j, const char *k, const flatbuffers::String *s) {
  j.key(k);
  if (!s || s->size() == 0)
    j.null();
  else
    j.value(s);
}

void jsonParam(Json &j, const View &v, const plan::Param &q) {
  j.beginObject();
  j.field("name", q.name());
  if (recovered(q)) {
    j.field("source_name", q.source_name());
    j.field("name_note", q.name_note());
  }
  if (q.source_loc() && q.source_loc()->size())
    j.field("source_loc", q.source_loc());
  jsonInlineList(j, "shape", q.shape());
  j.field("dtype", enumName(q.dtype(), plan::EnumNameDType));
  if (q.conv())
    j.field("conv", true);
  j.key("placements");
  j.beginArray(true);
  for (uint32_t i = 0; i < size(q.placements()); ++i)
    j.value(placementString(*q.placements()->Get(i)));
  j.endArray();
  if (v.reached(plan::Stage::validate) && q.local_shape()) {
    jsonInlineList(j, "local_shape", q.local_shape());
    const std::vector<int64_t> smallest = smallestLocalShape(q, v.p.mesh());
    if (!smallest.empty()) {
      j.key("smallest_local_shape");
      j.beginArray(true);
      for (int64_t d : smallest)
        j.value(d);
      j.endArray();
    }
  }
  if (v.reached(plan::Stage::select)) {
    bool muon = isMuon(q);
    const bool owned = ownerRouted(q);
    const bool sharded = routeOf(q) == plan::Route::sharded;
    j.field("role", enumName(q.role(), plan::EnumNameRole));
    j.field("role_reason", enumName(q.role_reason(), plan::EnumNameRoleReason));
    if (muon && q.matrix_optimizer() != plan::MatrixOptimizer::muon) // 1.7
      j.field("optimizer", enumName(q.matrix_optimizer(), plan::EnumNameMatrixOptimizer));
    if (muon && common::preconditions(q.matrix_optimizer())) // 1.8
      j.field("refresh_phase", q.refresh_phase());
    j.field("route", enumName(routeOf(q), plan::EnumNameRoute)); // 1.3
    j.field("route_reason", enumName(q.route_reason(), plan::EnumNameRouteReason));
    if (muon) {
      j.key("matrix");
      j.beginObject(true);
      j.field("batch", q.batch());
      j.field("rows", q.rows());
      j.field("cols", q.cols());
      j.endObject();
    }
    if (muon && size(q.block_sizes())) { // 1.9
      j.key("blocks");
      j.beginObject(true);
      j.field("dim", enumName(q.block_dim(), plan::EnumNameBlockDim));
      jsonInlineList(j, "sizes", q.block_sizes());
      j.field("source", enumName(q.block_source(), plan::EnumNameBlockSource));
      j.endObject();
    }
    if (v.reached(plan::Stage::group) && size(q.data_dims()))
      jsonInlineList(j, "data_dims", q.data_dims()); // 1.4
    if (muon && v.reached(plan::Stage::group)) {
      j.field("group", enumName(q.group(), plan::EnumNameShardingGroupKind));
      if (q.group() == plan::ShardingGroupKind::comm)
        j.field("comm_group", q.comm_group());
      if (gathers(q)) {
        j.key("gather");
        j.beginObject(true);
        j.field("mesh_dim", q.gather_mesh_dim());
        j.field("tensor_dim", q.gather_tensor_dim());
        if (v.reached(plan::Stage::layout))
          j.field("compute_index", q.compute_index());
        j.endObject();
      }
    }
    if (v.P > 1 && v.reached(plan::Stage::partition)) // 1.9
      j.field("pipeline_stage", q.pipeline_stage());
    if (owned && v.reached(plan::Stage::partition) && (muon || q.unit() >= 0)) {
      j.field("layer", q.layer());
      j.field("unit", q.unit());
      j.field("owner_rank", q.owner_rank());
      j.key("owner_slot");
      jsonSlot(j, q.owner_shard(), q.owner_replicate());
      if (v.D > 1)
        j.field("owner_data_index", q.owner_data_index()); // 1.4
      j.field("cost", q.cost());
      if (muon)
        j.field("ns_form", enumName(q.ns_form(), plan::EnumNameNsForm)); // 1.3
    }
    if (v.reached(plan::Stage::hooks) && (owned || sharded || q.hook_group() >= 0)) {
      j.key("hook");
      if (q.hook_group() >= 0)
        j.value(v.hookName(q.hook_group()));
      else
        j.null();
    }
    if (v.reached(plan::Stage::layout)) {
      if (owned || sharded)
        j.field("offset", q.offset());
      j.field("bytes", q.bytes());
      if (owned || sharded) {
        j.field("reduce_offset", q.reduce_offset());
        j.field("reduce_bytes", q.reduce_bytes());
      }
      if (sharded) {
        j.field("shard_elements", q.shard_elements());
        j.field("shard_offset", q.shard_offset());
      }
    }
  }
  j.endObject();
}

void jsonMesh(Json &j, const View &v, const plan::Plan &plan) {
  j.key("mesh");
  j.beginObject();
  j.key("dims");
  j.beginArray();
  if (const plan::Mesh *m = plan.mesh())
    for (uint32_t i = 0; i < size(m->dims()); ++i) {
      j.beginObject(true);
      j.field("name", m->dims()->Get(i)->name());
      j.field("size", m->dims()->Get(i)->size());
      if (m->dims()->Get(i)->carries_data())
        j.field("carries_data", true);
      if (m->dims()->Get(i)->is_stage()) // 1.9
        j.field("is_stage", true);
      j.endObject();
    }
  j.endArray();
  j.field("world_size", v.worldSize());
  j.field("shard_dim", int64_t(v.shardDim));
  j.field("replicate_dim", int64_t(v.replicateDim));
  j.field("shards", v.G);
  j.field("replicas", v.R);
  j.field("slots", v.slots());
  if (v.P > 1) { // 1.9
    j.field("stage_dim", int64_t(v.stageDim));
    j.field("stages", v.P);
  }
  if (const plan::Mesh *m = plan.mesh(); m && m->data_parallel_size())
    j.field("data_parallel_size", m->data_parallel_size());
  j.endObject();
}

void jsonOptions(Json &j, const plan::Plan &plan) {
  const plan::Options *op = plan.options();
  if (!op)
    return;
  j.key("options");
  j.beginObject();
  j.field("mode", enumName(op->mode(), plan::EnumNameMode));
  j.field("replicate_async", op->replicate_async());
  j.field("small_param_threshold", op->small_param_threshold());
  jsonOptString(j, "hook_boundary", op->hook_boundary());
  jsonOptString(j, "muon_include", op->muon_include());
  jsonOptString(j, "muon_exclude", op->muon_exclude());
  j.field("alignment", op->alignment());
  if (const plan::OptimizerDefaults *od = op->optimizer()) {
    j.key("optimizer");
    j.beginObject();
    j.field("lr", od->lr());
    j.field("momentum", od->momentum());
    j.field("nesterov", od->nesterov());
    j.field("weight_decay", od->weight_decay());
    j.field("ns_steps", od->ns_steps());
    j.field("ns_coefficients", enumName(od->ns_coefficients(), plan::EnumNameNsCoefficients));
    j.field("lr_scale", enumName(od->lr_scale(), plan::EnumNameLrScale));
    j.field("adamw_lr", od->adamw_lr());
    j.key("adamw_betas");
    j.beginArray(true);
    j.value(od->adamw_beta1());
    j.value(od->adamw_beta2());
    j.endArray();
    j.field("adamw_eps", od->adamw_eps());
    j.field("adamw_weight_decay", od->adamw_weight_decay());
    if (runsRule(plan, plan::MatrixOptimizer::normuon)) // 1.7
      j.field("normuon_beta2", od->normuon_beta2());
    if (runsRule(plan, plan::MatrixOptimizer::soap)) { // 1.8
      j.field("soap_lr", od->soap_lr());
      j.key("soap_betas");
      j.beginArray(true);
      j.value(od->soap_beta1());
      j.value(od->soap_beta2());
      j.endArray();
      j.field("soap_shampoo_beta", od->soap_shampoo_beta());
      j.field("soap_eps", od->soap_eps());
      j.field("soap_weight_decay", od->soap_weight_decay());
      j.field("soap_precondition_frequency", od->soap_precondition_frequency());
      j.field("soap_max_precond_dim", od->soap_max_precond_dim());
    }
    if (runsRule(plan, plan::MatrixOptimizer::shampoo)) { // 1.8
      j.field("shampoo_lr", od->shampoo_lr());
      j.key("shampoo_betas");
      j.beginArray(true);
      j.value(od->shampoo_beta1());
      j.value(od->shampoo_beta2());
      j.endArray();
      j.field("shampoo_eps", od->shampoo_eps());
      j.field("shampoo_weight_decay", od->shampoo_weight_decay());
      j.field("shampoo_graft_eps", od->shampoo_graft_eps());
      j.field("shampoo_precondition_frequency", od->shampoo_precondition_frequency());
      j.field("shampoo_max_preconditioner_dim", od->shampoo_max_preconditioner_dim());
    }
    j.endObject();
  }
  j.field("cost_model", enumName(op->cost_model(), plan::EnumNameCostModel)); // 1.1
  jsonOptString(j, "cost_table", op->cost_table());
  j.field("qk_clip_tau", op->qk_clip_tau());                   // 1.2
  j.field("adamw_route", routePolicyName(op->route_policy())); // 1.3
  j.field("sharded_threshold", op->sharded_threshold());
  j.endObject();
}

void jsonUnits(Json &j, const View &v, const plan::Plan &plan) {
  if (!v.reached(plan::Stage::partition))
    return;
  j.key("units");
  j.beginArray();
  for (uint32_t i = 0; i < size(plan.units()); ++i) {
    const plan::Unit *u = plan.units()->Get(i);
    j.beginObject();
    j.field("name", u->name());
    j.field("layer", u->layer());
    j.field("cost", u->cost());
    j.field("slot", u->slot());
    j.key("owner_slot");
    jsonSlot(j, v.slotShard(u->slot()), v.slotReplicate(u->slot()));
    if (v.D > 1)
      j.field("data_index", u->data_index()); // 1.4
    if (v.P > 1)                              // 1.9
      j.field("pipeline_stage", v.unitStage(*u));
    j.field("owner_rank", v.stageOwnerRank(v.slotShard(u->slot()), v.slotReplicate(u->slot()),
                                           u->data_index(), v.unitStage(*u)));
    jsonNames(j, v, "params", u->params());
    j.endObject();
  }
  j.endArray();
}

void jsonShardingGroups(Json &j, const View &v, const plan::Plan &plan) {
  if (!v.reached(plan::Stage::group))
    return;
  j.key("sharding_groups");
  j.beginObject();
  jsonNames(j, v, "no_comm", plan.no_comm());
  j.key("comm");
  j.beginArray();
  for (uint32_t i = 0; i < size(plan.comm_groups()); ++i) {
    const plan::CommGroup *g = plan.comm_groups()->Get(i);
    j.beginObject();
    j.field("key", g->key());
    jsonNames(j, v, "params", g->params());
    jsonInlineList(j, "shard_dims", g->shard_dims());
    jsonInlineList(j, "replicate_mesh_dims", g->replicate_mesh_dims());
    j.key("replicate_groups");
    j.beginArray(true);
    const ListedReplicateGroups l = listReplicateGroups(v, *g);
    for (const std::vector<int64_t> &ranks : l.groups) {
      j.beginArray(true);
      for (int64_t r : ranks)
        j.value(r);
      j.endArray();
    }
    j.endArray();
    // 1.5: a list cut at kMaxListed ranks says how many groups of how
    // many ranks there are.
    if (l.cut) {
      j.field("replicate_group_count", l.count);
      j.field("replicate_group_size", l.size);
    }
    j.endObject();
  }
  j.endArray();
  j.endObject();
}

void jsonHookGroups(Json &j, const View &v, const plan::Plan &plan) {
  if (!v.reached(plan::Stage::hooks))
    return;
  bool laidOut = v.reached(plan::Stage::layout);
  j.key("hook_groups");
  j.beginArray();
  for (uint32_t i = 0; i < size(plan.hook_groups()); ++i) {
    const plan::HookGroup *h = plan.hook_groups()->Get(i);
    j.beginObject();
    j.field("name", h->name());
    if (v.P > 1) // 1.9
      j.field("pipeline_stage", h->pipeline_stage());
    jsonNames(j, v, "params", h->params());
    if (laidOut) {
      j.field("buffer_bytes", h->buffer_bytes());
      j.field("reduce_buffer_bytes", h->reduce_buffer_bytes());
      j.key("segments");
      j.beginArray();
      for (uint32_t k = 0; k < size(h->segments()); ++k) {
        const plan::Segment *s = h->segments()->Get(k);
        j.beginObject();
        j.field("owner_rank", s->owner_rank());
        j.key("owner_slot");
        jsonSlot(j, s->owner_shard(), s->owner_replicate());
        if (v.D > 1)
          j.field("owner_data_index", s->owner_data_index()); // 1.4
        j.field("offset", s->offset());
        j.field("bytes", s->bytes());
        j.field("reduce_offset", s->reduce_offset());
        j.field("reduce_bytes", s->reduce_bytes());
        jsonNames(j, v, "params", s->params());
        j.endObject();
      }
      j.endArray();
    }
    j.endObject();
  }
  j.endArray();
}

// One load per fine slot up to common::kRankListLimit slots, else
// "slot_load_runs": [[first, last, load], ...] of equal loads (1.6).
void jsonSlotLoads(Json &j, const plan::Stats &stats) {
  const common::SlotLoads loads(&stats);
  if (loads.size() <= common::kRankListLimit) {
    j.key("slot_load");
    j.beginArray(true);
    for (const auto &r : loads.runs())
      for (int64_t i = r.first; i < r.end; ++i)
        j.value(r.load);
    j.endArray();
  } else {
    j.key("slot_load_runs");
    j.beginArray();
    for (const auto &r : loads.runs()) {
      j.beginArray(true);
      j.value(r.first);
      j.value(r.end - 1);
      j.value(r.load);
      j.endArray();
    }
    j.endArray();
  }
}

void jsonRankRows(Json &j, const View &v) {
  j.key("ranks");
  j.beginArray();
  // One object per rank up to common::kRankListLimit ranks, then one
  // per run of equal figures, its ranks from "rank" to "last_rank".
  common::RankRows(v.p).forEachListed([&](int64_t first, int64_t end, const plan::RankFigures *r) {
    j.beginObject();
    j.field("rank", first);
    if (end - first > 1)
      j.field("last_rank", end - 1);
    j.field("owned_params", r->owned_params());
    j.field("owned_elements", r->owned_elements());
    j.field("master_bytes", r->master_bytes());
    j.field("momentum_bytes", r->momentum_bytes());
    j.field("peak_buffer_bytes", r->peak_buffer_bytes());
    j.field("ns_flops", r->ns_flops());
    j.field("broadcast_send_bytes", r->broadcast_send_bytes());
    j.field("broadcast_recv_bytes", r->broadcast_recv_bytes());
    j.field("reduce_send_bytes", r->reduce_send_bytes());
    j.field("reduce_recv_bytes", r->reduce_recv_bytes());
    j.field("replicate_send_bytes", r->replicate_send_bytes());
    j.field("replicate_recv_bytes", r->replicate_recv_bytes());
    j.field("allreduce_bytes", r->allreduce_bytes());
    j.field("gather_send_bytes", r->gather_send_bytes());
    j.field("gather_recv_bytes", r->gather_recv_bytes());
    j.field("scatter_send_bytes", r->scatter_send_bytes());
    j.field("scatter_recv_bytes", r->scatter_recv_bytes());
    j.field("data_allreduce_bytes", r->data_allreduce_bytes());
    j.field("allgather_send_bytes", r->allgather_send_bytes()); // 1.3
    j.field("allgather_recv_bytes", r->allgather_recv_bytes());
    j.field("reduce_scatter_send_bytes", r->reduce_scatter_send_bytes());
    j.field("reduce_scatter_recv_bytes", r->reduce_scatter_recv_bytes());
    j.field("value_bytes", r->value_bytes());
    j.field("adam_moment_bytes", r->adam_moment_bytes());
    j.field("grad_bytes", r->grad_bytes());
    j.field("memory_bytes", r->memory_bytes());
    j.endObject();
  });
  j.endArray();
}

void jsonStats(Json &j, const View &v, const plan::Plan &plan) {
  if (!v.reached(plan::Stage::partition) || !plan.stats())
    return;
  const plan::Stats *s = plan.stats();
  j.key("stats");
  j.beginObject();
  j.field("slots", s->slots());
  jsonSlotLoads(j, *s);
  j.field("total_cost", s->total_cost());
  j.field("lower_bound", s->lower_bound());
  j.field("max_load", s->max_load());
  j.field("imbalance", s->imbalance());
  j.field("lpt_max_load", s->lpt_max_load());
  j.field("refinement_moves", s->refinement_moves());
  j.field("layer_rule_violations", s->layer_rule_violations());
  j.field("muon_params", s->muon_params());
  j.field("adamw_params", s->adamw_params());
  j.field("muon_elements", s->muon_elements());
  j.field("adamw_elements", s->adamw_elements());
  if (s->lower_bound_kind()) {
    j.field("lower_bound_kind", str(s->lower_bound_kind()));
    j.field("simple_lower_bound", s->simple_lower_bound());
    j.field("small_unit_cap", s->small_unit_cap());
    j.field("optimal", s->optimal());
  }
  if (s->lower_bound_kind() && v.reached(plan::Stage::layout))
    j.field("max_owners_per_hook_group", s->max_owners_per_hook_group());
  if (s->pipeline_stages()) { // 1.9
    j.key("pipeline_stages");
    j.beginArray();
    for (uint32_t k = 0; k < s->pipeline_stages()->size(); ++k) {
      const plan::PipelineStageStats *r = s->pipeline_stages()->Get(k);
      j.beginObject(true);
      j.field("stage", r->stage());
      j.field("params", r->params());
      j.field("param_elements", r->param_elements());
      if (v.reached(plan::Stage::hooks)) {
        j.field("first_hook_group", r->first_hook_group());
        j.field("hook_groups", r->hook_groups());
      }
      j.field("total_cost", r->total_cost());
      j.field("lower_bound", r->lower_bound());
      j.field("max_load", r->max_load());
      j.field("imbalance", r->imbalance());
      j.endObject();
    }
    j.endArray();
  }
  if (v.reached(plan::Stage::layout))
    jsonRankRows(j, v);
  j.endObject();
}

} // namespace

std::string printJson(const plan::Plan &plan) {
  View v(plan);
  Json j;
  j.beginObject();
  j.field("format_version", v.version());
  j.field("producer", plan.producer());
  j.field("fingerprint", hex64(plan.fingerprint()));
  j.field("stage", v.stageName());
  j.field("source", plan.source());
  j.field("model", plan.model_name());

  jsonMesh(j, v, plan);
  jsonOptions(j, plan);
  j.key("params");
  j.beginArray();
  for (uint32_t i = 0; i < size(plan.params()); ++i)
    jsonParam(j, v, *plan.params()->Get(i));
  j.endArray();
  if (size(plan.buffers())) { // 1.7
    j.key("buffers");
    j.beginArray();
    for (const plan::Buffer *b : *plan.buffers()) {
      j.beginObject();
      j.field("name", b->name());
      jsonInlineList(j, "shape", b->shape());
      j.field("reason", b->reason());
      j.endObject();
    }
    j.endArray();
  }
  jsonQkClip(j, v);

  jsonUnits(j, v, plan);
  jsonShardingGroups(j, v, plan);
  jsonHookGroups(j, v, plan);
  jsonStats(j, v, plan);
  j.endObject();
  j.out += '\n';
  return j.out;
}

} // namespace dmuon::planfile
