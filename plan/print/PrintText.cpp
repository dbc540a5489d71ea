// The text form of a plan (docs/plan-format.md): one line per param, unit,
// group, segment, slot and rank, for people and FileCheck.
#include "common/MatrixOptimizers.h"
#include "plan/print/PlanPrinter.h"
#include "plan/print/PrintCommon.h"
#include "plan/print/PrintQkClip.h"

namespace dmuon::planfile {

using namespace print;

namespace {

std::string nameList(const View &v, const flatbuffers::Vector<int32_t> *list) {
  std::string s = "[";
  for (uint32_t i = 0; i < size(list); ++i) {
    if (i)
      s += ',';
    s += v.paramName(list->Get(i));
  }
  return s + "]";
}

// The data dims of a unit's or segment's params (they share them).
const flatbuffers::Vector<int32_t> *firstParamDataDims(const View &v,
                                                       const flatbuffers::Vector<int32_t> *list) {
  const plan::Param *q = size(list) ? v.param(list->Get(0)) : nullptr;
  return q ? q->data_dims() : nullptr;
}

void textParam(const View &v, const plan::Param &q, std::string &o) {
  o += "param " + str(q.name()) + " shape=[";
  for (uint32_t i = 0; i < size(q.shape()); ++i) {
    if (i)
      o += ',';
    o += num(q.shape()->Get(i));
  }
  o += "] dtype=" + enumName(q.dtype(), plan::EnumNameDType) + " placements=[";
  for (uint32_t i = 0; i < size(q.placements()); ++i) {
    if (i)
      o += ',';
    o += placementString(*q.placements()->Get(i));
  }
  o += ']';
  if (v.reached(plan::Stage::validate) && localDiffers(q)) {
    o += " local=[";
    for (uint32_t i = 0; i < size(q.local_shape()); ++i) {
      if (i)
        o += ',';
      o += num(q.local_shape()->Get(i));
    }
    o += ']';
    // Uneven: the last coordinates hold less (torch.chunk).
    const std::vector<int64_t> smallest = smallestLocalShape(q, v.p.mesh());
    for (size_t i = 0; i < smallest.size(); ++i)
      o += (i ? "," : " smallest=[") + num(smallest[i]) + (i + 1 == smallest.size() ? "]" : "");
  }
  if (q.conv())
    o += " conv";
  if (recovered(q))
    o += " source=" + str(q.source_name()) + " note=\"" + str(q.name_note()) + "\"";
  if (!v.reached(plan::Stage::select))
    return;
  bool muon = isMuon(q);
  const bool owned = ownerRouted(q);
  const bool sharded = routeOf(q) == plan::Route::sharded;
  o += " role=" + enumName(q.role(), plan::EnumNameRole) +
       " reason=" + enumName(q.role_reason(), plan::EnumNameRoleReason);
  // Muon's own rule goes unsaid, as in every plan before 1.7.
  if (muon && q.matrix_optimizer() != plan::MatrixOptimizer::muon)
    o += " optimizer=" + enumName(q.matrix_optimizer(), plan::EnumNameMatrixOptimizer);
  if (muon && common::preconditions(q.matrix_optimizer())) // 1.8
    o += " refresh_phase=" + num(int64_t(q.refresh_phase()));
  if (!muon)
    o += " route=" + enumName(routeOf(q), plan::EnumNameRoute) +
         " route_reason=" + enumName(q.route_reason(), plan::EnumNameRouteReason);
  if (muon)
    o += " matrix=" + num(q.batch()) + "x" + num(q.rows()) + "x" + num(q.cols());
  if (muon && size(q.block_sizes())) { // 1.9
    o += " blocks=" + enumName(q.block_dim(), plan::EnumNameBlockDim) + ":";
    for (uint32_t i = 0; i < q.block_sizes()->size(); ++i)
      o += (i ? "," : "[") + num(q.block_sizes()->Get(i));
    o += "] blocks_from=" + enumName(q.block_source(), plan::EnumNameBlockSource);
  }
  if (muon && v.reached(plan::Stage::group)) {
    o += " group=" + enumName(q.group(), plan::EnumNameShardingGroupKind);
    if (gathers(q)) {
      o += " gather=" + v.dimName(q.gather_mesh_dim()) + ":" + num(int64_t(q.gather_tensor_dim()));
      if (v.reached(plan::Stage::layout))
        o += " compute=" + num(int64_t(q.compute_index()));
    }
  }
  if (v.P > 1 && v.reached(plan::Stage::partition)) // 1.9
    o += " stage=" + num(int64_t(q.pipeline_stage()));
  if (owned && v.reached(plan::Stage::partition) && (muon || q.unit() >= 0))
    o += " layer=" + orDash(str(q.layer())) + " unit=" + num(int64_t(q.unit())) +
         " owner=" + num(int64_t(q.owner_rank())) + " slot=(" + num(int64_t(q.owner_shard())) +
         "," + num(int64_t(q.owner_replicate())) + ")" +
         v.dataString(q.owner_data_index(), q.data_dims()) + " cost=" + num(q.cost()) +
         (muon ? " form=" + enumName(q.ns_form(), plan::EnumNameNsForm) : std::string());
  if (v.reached(plan::Stage::hooks) && (owned || sharded || q.hook_group() >= 0))
    o += " hook=" + (q.hook_group() >= 0 ? v.hookName(q.hook_group()) : std::string("none"));
  if (v.reached(plan::Stage::layout)) {
    if (owned || sharded)
      o += " offset=" + num(q.offset()) + " bytes=" + num(q.bytes()) +
           " reduce_offset=" + num(q.reduce_offset()) + " reduce_bytes=" + num(q.reduce_bytes());
    else // append, not "literal" + string: GCC 12 -O3 warns falsely (-Wrestrict)
      o.append(" bytes=").append(num(q.bytes()));
    if (sharded)
      o.append(" shard_elements=")
          .append(num(q.shard_elements()))
          .append(" shard_offset=")
          .append(num(q.shard_offset()));
  }
}

std::string quotedOr(const flatbuffers::String *s, const char *none) {
  if (!s || s->size() == 0)
    return none;
  return "'" + s->str() + "'";
}

void textOptions(const plan::Plan &plan, std::string &o) {
  const plan::Options *op = plan.options();
  if (!op)
    return;
  o += "options: mode=" + enumName(op->mode(), plan::EnumNameMode) +
       " replicate_async=" + boolName(op->replicate_async()) +
       " small_param_threshold=" + num(op->small_param_threshold()) +
       " hook_boundary=" + quotedOr(op->hook_boundary(), "default") +
       " muon_include=" + quotedOr(op->muon_include(), "none") +
       " muon_exclude=" + quotedOr(op->muon_exclude(), "none") +
       " alignment=" + num(int64_t(op->alignment())) +
       " cost_model=" + enumName(op->cost_model(), plan::EnumNameCostModel);
  if (op->cost_table() && op->cost_table()->size())
    o += " cost_table=" + quotedOr(op->cost_table(), "none");
  o += " qk_clip_tau=" + num(op->qk_clip_tau()) +
       " adamw_route=" + routePolicyName(op->route_policy()) +
       " sharded_threshold=" + num(op->sharded_threshold()) + "\n";
  if (const plan::OptimizerDefaults *od = op->optimizer())
    o += "optimizer: lr=" + num(od->lr()) + " momentum=" + num(od->momentum()) +
         " nesterov=" + boolName(od->nesterov()) + " weight_decay=" + num(od->weight_decay()) +
         " ns_steps=" + num(int64_t(od->ns_steps())) +
         " ns_coefficients=" + enumName(od->ns_coefficients(), plan::EnumNameNsCoefficients) +
         " lr_scale=" + enumName(od->lr_scale(), plan::EnumNameLrScale) +
         " adamw_lr=" + num(od->adamw_lr()) + " adamw_betas=" + num(od->adamw_beta1()) + "," +
         num(od->adamw_beta2()) + " adamw_eps=" + num(od->adamw_eps()) +
         " adamw_weight_decay=" + num(od->adamw_weight_decay()) +
         (runsRule(plan, plan::MatrixOptimizer::normuon)
              ? " normuon_beta2=" + num(od->normuon_beta2())
              : std::string()) +
         (runsRule(plan, plan::MatrixOptimizer::soap)
              ? " soap_lr=" + num(od->soap_lr()) + " soap_betas=" + num(od->soap_beta1()) + "," +
                    num(od->soap_beta2()) + " soap_shampoo_beta=" + num(od->soap_shampoo_beta()) +
                    " soap_eps=" + num(od->soap_eps()) + " soap_weight_decay=" +
                    num(od->soap_weight_decay()) + " soap_precondition_frequency=" +
                    num(int64_t(od->soap_precondition_frequency())) +
                    " soap_max_precond_dim=" + num(int64_t(od->soap_max_precond_dim()))
              : std::string()) +
         (runsRule(plan, plan::MatrixOptimizer::shampoo)
              ? " shampoo_lr=" + num(od->shampoo_lr()) +
                    " shampoo_betas=" + num(od->shampoo_beta1()) + "," + num(od->shampoo_beta2()) +
                    " shampoo_eps=" + num(od->shampoo_eps()) +
                    " shampoo_weight_decay=" + num(od->shampoo_weight_decay()) +
                    " shampoo_graft_eps=" + num(od->shampoo_graft_eps()) +
                    " shampoo_precondition_frequency=" +
                    num(int64_t(od->shampoo_precondition_frequency())) +
                    " shampoo_max_preconditioner_dim=" +
                    num(int64_t(od->shampoo_max_preconditioner_dim()))
              : std::string()) +
         "\n";
}

// 1.7: what the input holds that is not trained, and why; no section when
// there is none.
void textBuffers(const plan::Plan &plan, std::string &o) {
  if (!size(plan.buffers()))
    return;
  o += "buffers:\n";
  for (const plan::Buffer *b : *plan.buffers()) {
    o += "buffer " + str(b->name()) + " shape=[";
    for (uint32_t i = 0; i < size(b->shape()); ++i)
      o += (i ? "," : "") + num(b->shape()->Get(i));
    o += "] reason=\"" + str(b->reason()) + "\"\n";
  }
}

void textUnits(const View &v, const plan::Plan &plan, std::string &o) {
  if (!v.reached(plan::Stage::partition))
    return;
  o += "units:\n";
  for (uint32_t i = 0; i < size(plan.units()); ++i) {
    const plan::Unit *u = plan.units()->Get(i);
    o += "unit " + num(int64_t(i)) + " " + str(u->name()) + " layer=" + orDash(str(u->layer())) +
         " cost=" + num(u->cost()) + " slot=" + num(int64_t(u->slot())) +
         v.dataString(u->data_index(), firstParamDataDims(v, u->params())) +
         (v.P > 1 ? " stage=" + num(v.unitStage(*u)) : std::string()) +
         " params=" + num(int64_t(size(u->params()))) + "\n";
  }
}

void textShardingGroups(const View &v, const plan::Plan &plan, std::string &o) {
  if (!v.reached(plan::Stage::group))
    return;
  o += "sharding_groups:\n";
  o += "no_comm: " + num(int64_t(size(plan.no_comm()))) + " params\n";
  for (uint32_t i = 0; i < size(plan.no_comm()); ++i)
    o += "  no_comm " + v.paramName(plan.no_comm()->Get(i)) + "\n";
  for (uint32_t i = 0; i < size(plan.comm_groups()); ++i) {
    const plan::CommGroup *g = plan.comm_groups()->Get(i);
    o += "comm " + str(g->key()) + " params=" + nameList(v, g->params()) + " replicate_groups=[";
    const ListedReplicateGroups l = listReplicateGroups(v, *g);
    for (size_t j = 0; j < l.groups.size(); ++j) {
      o += j ? ",[" : "[";
      for (size_t k = 0; k < l.groups[j].size(); ++k)
        o += (k ? "," : "") + num(l.groups[j][k]);
      o += static_cast<int64_t>(l.groups[j].size()) < l.size ? ",...]" : "]";
    }
    // A cut list says so and how many groups of how many ranks there are.
    o += l.cut ? ",...] groups=" + num(l.count) + " ranks_per_group=" + num(l.size) +
                     " (listing cut at " + num(kMaxListed) + " ranks)\n"
               : "]\n";
  }
}

void textHookGroups(const View &v, const plan::Plan &plan, std::string &o) {
  if (!v.reached(plan::Stage::hooks))
    return;
  bool laidOut = v.reached(plan::Stage::layout);
  o += "hook_groups:\n";
  for (uint32_t i = 0; i < size(plan.hook_groups()); ++i) {
    const plan::HookGroup *h = plan.hook_groups()->Get(i);
    o += "hook " + str(h->name()) + " params=" + num(int64_t(size(h->params())));
    if (v.P > 1) // 1.9
      o += " stage=" + num(int64_t(h->pipeline_stage()));
    if (laidOut)
      o += " buffer_bytes=" + num(h->buffer_bytes()) +
           " reduce_buffer_bytes=" + num(h->reduce_buffer_bytes());
    o += '\n';
    if (!laidOut)
      continue;
    for (uint32_t j = 0; j < size(h->segments()); ++j) {
      const plan::Segment *s = h->segments()->Get(j);
      o += "  segment owner=" + num(int64_t(s->owner_rank())) + " slot=(" +
           num(int64_t(s->owner_shard())) + "," + num(int64_t(s->owner_replicate())) + ")" +
           v.dataString(s->owner_data_index(), firstParamDataDims(v, s->params())) +
           " offset=" + num(s->offset()) + " bytes=" + num(s->bytes()) +
           " reduce_offset=" + num(s->reduce_offset()) + " reduce_bytes=" + num(s->reduce_bytes()) +
           " params=" + nameList(v, s->params()) + "\n";
    }
  }
}

void textSlotLoads(const View &v, const plan::Stats &stats, std::string &o) {
  // Fine slots: slot * D + data index; one line each up to
  // common::kRankListLimit slots, then one per run of equal loads
  // ("slots A-B load=X"), so the listing follows the partition, not the
  // world size.
  const common::SlotLoads loads(&stats);
  const auto &runs = loads.runs();
  const int64_t nLoad = loads.size();
  for (size_t k = 0; k < runs.size() && nLoad > common::kRankListLimit;) {
    size_t e = k + 1; // an old plan's per-slot entries merge here too
    while (e < runs.size() && runs[e].load == runs[k].load)
      ++e;
    const int64_t first = runs[k].first, last = runs[e - 1].end - 1;
    o += (first == last ? "slot " + num(first) : "slots " + num(first) + "-" + num(last)) +
         " load=" + num(runs[k].load) + "\n";
    k = e;
  }
  // With pipeline stages (1.9) each stage's fine slots follow the last's.
  for (int64_t i = 0; i < nLoad && nLoad <= common::kRankListLimit; ++i) {
    const int64_t stage = i / v.fineSlots(), fine = i % v.fineSlots();
    const int64_t slot = fine / v.D, d = fine % v.D;
    int64_t sh = v.slotShard(slot), re = v.slotReplicate(slot);
    o += "slot " + num(int64_t(i)) + " (" + num(sh) + "," + num(re) +
         (v.D > 1 ? "," + num(d) : std::string()) + ")" +
         (v.P > 1 ? " stage=" + num(stage) : std::string()) +
         " rank=" + num(v.stageOwnerRank(sh, re, d, stage)) + " load=" + num(loads.at(i)) + "\n";
  }
}

void textRankRows(const View &v, std::string &o) {
  // One line per rank up to common::kRankListLimit ranks, then per run
  // of equal figures ("ranks A-B").
  common::RankRows(v.p).forEachListed([&](int64_t first, int64_t end, const plan::RankFigures *r) {
    o += (end - first == 1 ? "rank " + num(first) : "ranks " + num(first) + "-" + num(end - 1)) +
         " owned_params=" + num(int64_t(r->owned_params())) +
         " owned_elements=" + num(r->owned_elements()) + " master_bytes=" + num(r->master_bytes()) +
         " momentum_bytes=" + num(r->momentum_bytes()) +
         " peak_buffer_bytes=" + num(r->peak_buffer_bytes()) + " ns_flops=" + num(r->ns_flops()) +
         " broadcast_send=" + num(r->broadcast_send_bytes()) +
         " broadcast_recv=" + num(r->broadcast_recv_bytes()) +
         " reduce_send=" + num(r->reduce_send_bytes()) +
         " reduce_recv=" + num(r->reduce_recv_bytes()) +
         " replicate_send=" + num(r->replicate_send_bytes()) +
         " replicate_recv=" + num(r->replicate_recv_bytes()) +
         " allreduce=" + num(r->allreduce_bytes()) + " gather_send=" + num(r->gather_send_bytes()) +
         " gather_recv=" + num(r->gather_recv_bytes()) +
         " scatter_send=" + num(r->scatter_send_bytes()) +
         " scatter_recv=" + num(r->scatter_recv_bytes()) +
         (r->data_allreduce_bytes() ? " data_allreduce=" + num(r->data_allreduce_bytes())
                                    : std::string()) +
         " allgather_send=" + num(r->allgather_send_bytes()) +
         " allgather_recv=" + num(r->allgather_recv_bytes()) +
         " reduce_scatter_send=" + num(r->reduce_scatter_send_bytes()) +
         " reduce_scatter_recv=" + num(r->reduce_scatter_recv_bytes()) +
         " value_bytes=" + num(r->value_bytes()) +
         " adam_moment_bytes=" + num(r->adam_moment_bytes()) +
         " grad_bytes=" + num(r->grad_bytes()) + " memory_bytes=" + num(r->memory_bytes()) + "\n";
  });
}

void textStats(const View &v, const plan::Plan &plan, std::string &o) {
  if (!v.reached(plan::Stage::partition) || !plan.stats())
    return;
  const plan::Stats *s = plan.stats();
  o += "stats:\n";
  o += "slots=" + num(int64_t(s->slots())) + " total_cost=" + num(s->total_cost()) +
       " lower_bound=" + num(s->lower_bound()) + " max_load=" + num(s->max_load()) +
       " imbalance=" + fixed4(s->imbalance()) + " lpt_max_load=" + num(s->lpt_max_load()) +
       " refinement_moves=" + num(int64_t(s->refinement_moves())) +
       " layer_rule_violations=" + num(int64_t(s->layer_rule_violations()));
  if (s->lower_bound_kind()) { // format 1.1
    o += " lower_bound_kind=" + str(s->lower_bound_kind()) +
         " simple_lower_bound=" + num(s->simple_lower_bound()) +
         " small_unit_cap=" + num(s->small_unit_cap());
    if (v.reached(plan::Stage::layout))
      o += " max_owners_per_hook_group=" + num(int64_t(s->max_owners_per_hook_group()));
    if (s->optimal())
      o += " optimal";
  }
  o += "\n";
  // 1.9: each pipeline stage's own partition.
  for (uint32_t k = 0; s->pipeline_stages() && k < s->pipeline_stages()->size(); ++k) {
    const plan::PipelineStageStats *r = s->pipeline_stages()->Get(k);
    o += "stage " + num(int64_t(r->stage())) + " params=" + num(int64_t(r->params())) +
         " param_elements=" + num(r->param_elements());
    if (v.reached(plan::Stage::hooks))
      o += " hook_groups=" + num(int64_t(r->first_hook_group())) + "+" +
           num(int64_t(r->hook_groups()));
    o += " total_cost=" + num(r->total_cost()) + " lower_bound=" + num(r->lower_bound()) +
         " max_load=" + num(r->max_load()) + " imbalance=" + fixed4(r->imbalance()) + "\n";
  }
  textSlotLoads(v, *s, o);
  textRankRows(v, o);
}

} // namespace

std::string printText(const plan::Plan &plan) {
  View v(plan);
  std::string o;
  o += "; dmuon plan " + v.version() + " stage=" + v.stageName() +
       " producer=" + str(plan.producer()) + "\n";
  o += "; fingerprint " + hex64(plan.fingerprint()) + "\n";
  o += "source: " + str(plan.source()) + "\n";
  o += "model: " + str(plan.model_name()) + "\n";
  o += "mesh: " + v.meshString() + " world_size=" + num(v.worldSize()) + " shards=" + num(v.G) +
       " replicas=" + num(v.R) + " slots=" + num(v.slots());
  if (v.P > 1)
    o += " stages=" + num(v.P);
  if (const plan::Mesh *m = plan.mesh()) {
    std::string carrying;
    for (uint32_t i = 0; i < size(m->dims()); ++i)
      if (m->dims()->Get(i)->carries_data())
        carrying.append(carrying.empty() ? "" : ",").append(str(m->dims()->Get(i)->name()));
    if (!carrying.empty())
      o += " data_carrying=" + carrying + " data_parallel_size=" + num(m->data_parallel_size());
  }
  o += "\n";
  textOptions(plan, o);
  o += "params:\n";
  for (uint32_t i = 0; i < size(plan.params()); ++i) {
    textParam(v, *plan.params()->Get(i), o);
    o += '\n';
  }
  textBuffers(plan, o);
  textQkClip(v, o);
  textUnits(v, plan, o);
  textShardingGroups(v, plan, o);
  textHookGroups(v, plan, o);
  textStats(v, plan, o);
  return o;
}

} // namespace dmuon::planfile
