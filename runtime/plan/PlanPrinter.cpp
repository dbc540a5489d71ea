// Text, JSON and summary forms of a plan (docs/plan-format.md).
//
// Output is a pure function of the buffer: numbers go through std::to_chars
// (locale-free, shortest round trip), lists are printed in plan order, and
// fields the plan's stage has not computed yet are left out. The printers
// never index past a vector: a plan that was not verified prints '?' where an
// index is out of range instead of crashing.
#include "plan/PlanPrinter.h"

#include "common/Hex.h"
#include "common/MeshIndex.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <initializer_list>

namespace dmuon::planfile {

namespace fb = dmuon::plan;

namespace {

// ---------------------------------------------------------------- helpers

std::string num(int64_t v) { return std::to_string(v); }

// Shortest round-trip, fixed notation; "0" for zero (and negative zero).
std::string num(double v) {
  if (v == 0)
    return "0";
  char buf[512];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  if (r.ec != std::errc())
    return "?";
  return std::string(buf, r.ptr);
}

std::string fixed4(double v) {
  char buf[512];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, 4);
  if (r.ec != std::errc())
    return "?";
  return std::string(buf, r.ptr);
}

using common::hex64;

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }
std::string orDash(const std::string &s) { return s.empty() ? "-" : s; }
const char *boolName(bool b) { return b ? "true" : "false"; }

template <typename T> uint32_t size(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}

// Read-only view of a plan with bounds-checked lookups and the facts every
// form needs.
class View {
public:
  explicit View(const fb::Plan &p) : p(p) {
    if (const fb::Mesh *m = p.mesh()) {
      for (uint32_t i = 0; i < size(m->dims()); ++i) {
        dims.push_back(m->dims()->Get(i)->size());
        dimNames.push_back(str(m->dims()->Get(i)->name()));
      }
      shardDim = m->shard_dim();
      replicateDim = m->replicate_dim();
      G = m->num_shards() > 0 ? m->num_shards() : 1;
      R = m->num_replicas() > 0 ? m->num_replicas() : 1;
    }
  }

  bool reached(fb::Stage s) const {
    return static_cast<int>(p.stage()) >= static_cast<int>(s);
  }
  std::string stageName() const {
    const char *n = fb::EnumNameStage(p.stage());
    return *n ? n : "?";
  }
  std::string version() const {
    return std::to_string(p.format_major()) + "." + std::to_string(p.format_minor());
  }
  const fb::Param *param(int64_t i) const {
    if (i < 0 || i >= size(p.params()))
      return nullptr;
    return p.params()->Get(static_cast<uint32_t>(i));
  }
  std::string paramName(int64_t i) const {
    const fb::Param *q = param(i);
    return q ? str(q->name()) : "?";
  }
  std::string hookName(int64_t i) const {
    if (i < 0 || i >= size(p.hook_groups()))
      return "?";
    return str(p.hook_groups()->Get(static_cast<uint32_t>(i))->name());
  }
  int64_t slots() const { return G * R; }
  int64_t slotShard(int64_t slot) const { return slot < 0 ? -1 : slot % G; }
  int64_t slotReplicate(int64_t slot) const { return slot < 0 ? -1 : slot / G; }
  // Rank of owner slot (s, r) with every other mesh dim at 0 (row-major).
  int64_t slotRank(int64_t s, int64_t r) const {
    return common::slotRank(dims, shardDim, replicateDim, s, r);
  }
  std::string meshString() const {
    std::string s;
    if (const fb::Mesh *m = p.mesh())
      for (uint32_t i = 0; i < size(m->dims()); ++i) {
        const fb::MeshDim *d = m->dims()->Get(i);
        if (!s.empty())
          s += ',';
        s += str(d->name()) + "=" + num(int64_t(d->size()));
      }
    return s;
  }
  int64_t worldSize() const { return p.mesh() ? p.mesh()->world_size() : 0; }
  std::string dimName(int64_t i) const {
    return i >= 0 && i < static_cast<int64_t>(dimNames.size()) ? dimNames[i] : "?";
  }

  const fb::Plan &p;
  std::vector<int64_t> dims;
  std::vector<std::string> dimNames;
  int shardDim = -1, replicateDim = -1;
  int64_t G = 1, R = 1;
};

std::string placementString(const fb::Placement &pl) {
  switch (pl.kind()) {
  case fb::PlacementKind::replicate:
    return "Replicate";
  case fb::PlacementKind::shard:
    return "Shard(" + num(int64_t(pl.dim())) + ")";
  case fb::PlacementKind::strided_shard:
    return "StridedShard(" + num(int64_t(pl.dim())) + ", " +
           num(int64_t(pl.split_factor())) + ")";
  case fb::PlacementKind::partial:
    return "Partial(" + (pl.reduce_op() ? pl.reduce_op()->str() : std::string("sum")) + ")";
  }
  return "?";
}

template <typename E, typename F> std::string enumName(E e, F nameFn) {
  const char *n = nameFn(e);
  return (n && *n) ? n : "?";
}

bool recovered(const fb::Param &q) {
  return q.name_origin() == fb::NameOrigin::recovered_from_node;
}
bool isMuon(const fb::Param &q) { return q.role() == fb::Role::muon; }
// A comm param that gathers over a model-parallel mesh dim for NS.
bool gathers(const fb::Param &q) {
  return q.group() == fb::ShardingGroupKind::comm && q.gather_mesh_dim() >= 0;
}
// local_shape, when the plan has it and it differs from shape.
bool localDiffers(const fb::Param &q) {
  if (!q.local_shape())
    return false;
  if (size(q.local_shape()) != size(q.shape()))
    return true;
  for (uint32_t i = 0; i < size(q.shape()); ++i)
    if (q.local_shape()->Get(i) != q.shape()->Get(i))
      return true;
  return false;
}

std::string nameList(const View &v, const flatbuffers::Vector<int32_t> *list) {
  std::string s = "[";
  for (uint32_t i = 0; i < size(list); ++i) {
    if (i)
      s += ',';
    s += v.paramName(list->Get(i));
  }
  return s + "]";
}

// ---------------------------------------------------------------- text

void textParam(const View &v, const fb::Param &q, std::string &o) {
  o += "param " + str(q.name()) + " shape=[";
  for (uint32_t i = 0; i < size(q.shape()); ++i) {
    if (i)
      o += ',';
    o += num(q.shape()->Get(i));
  }
  o += "] dtype=" + enumName(q.dtype(), fb::EnumNameDType) + " placements=[";
  for (uint32_t i = 0; i < size(q.placements()); ++i) {
    if (i)
      o += ',';
    o += placementString(*q.placements()->Get(i));
  }
  o += ']';
  if (v.reached(fb::Stage::validate) && localDiffers(q)) {
    o += " local=[";
    for (uint32_t i = 0; i < size(q.local_shape()); ++i) {
      if (i)
        o += ',';
      o += num(q.local_shape()->Get(i));
    }
    o += ']';
  }
  if (q.conv())
    o += " conv";
  if (recovered(q))
    o += " source=" + str(q.source_name()) + " note=\"" + str(q.name_note()) + "\"";
  if (!v.reached(fb::Stage::select))
    return;
  bool muon = isMuon(q);
  o += " role=" + enumName(q.role(), fb::EnumNameRole) +
       " reason=" + enumName(q.role_reason(), fb::EnumNameRoleReason);
  if (muon)
    o += " matrix=" + num(q.batch()) + "x" + num(q.rows()) + "x" + num(q.cols());
  if (muon && v.reached(fb::Stage::group)) {
    o += " group=" + enumName(q.group(), fb::EnumNameShardingGroupKind);
    if (gathers(q)) {
      o += " gather=" + v.dimName(q.gather_mesh_dim()) + ":" +
           num(int64_t(q.gather_tensor_dim()));
      if (v.reached(fb::Stage::layout))
        o += " compute=" + num(int64_t(q.compute_index()));
    }
  }
  if (muon && v.reached(fb::Stage::partition))
    o += " layer=" + orDash(str(q.layer())) + " unit=" + num(int64_t(q.unit())) +
         " owner=" + num(int64_t(q.owner_rank())) + " slot=(" +
         num(int64_t(q.owner_shard())) + "," + num(int64_t(q.owner_replicate())) +
         ") cost=" + num(q.cost());
  if (v.reached(fb::Stage::hooks) && (muon || q.hook_group() >= 0))
    o += " hook=" + (q.hook_group() >= 0 ? v.hookName(q.hook_group()) : std::string("none"));
  if (v.reached(fb::Stage::layout)) {
    if (muon)
      o += " offset=" + num(q.offset()) + " bytes=" + num(q.bytes()) +
           " reduce_offset=" + num(q.reduce_offset()) +
           " reduce_bytes=" + num(q.reduce_bytes());
    else
      o += " bytes=" + num(q.bytes());
  }
}

std::string quotedOr(const flatbuffers::String *s, const char *none) {
  if (!s || s->size() == 0)
    return none;
  return "'" + s->str() + "'";
}

} // namespace

std::string printText(const fb::Plan &plan) {
  View v(plan);
  std::string o;
  o += "; dmuon plan " + v.version() + " stage=" + v.stageName() +
       " producer=" + str(plan.producer()) + "\n";
  o += "; fingerprint " + hex64(plan.fingerprint()) + "\n";
  o += "source: " + str(plan.source()) + "\n";
  o += "model: " + str(plan.model_name()) + "\n";
  o += "mesh: " + v.meshString() + " world_size=" + num(v.worldSize()) +
       " shards=" + num(v.G) + " replicas=" + num(v.R) + " slots=" + num(v.slots()) + "\n";
  if (const fb::Options *op = plan.options()) {
    o += "options: mode=" + enumName(op->mode(), fb::EnumNameMode) +
         " replicate_async=" + boolName(op->replicate_async()) +
         " small_param_threshold=" + num(op->small_param_threshold()) +
         " hook_boundary=" + quotedOr(op->hook_boundary(), "default") +
         " muon_include=" + quotedOr(op->muon_include(), "none") +
         " muon_exclude=" + quotedOr(op->muon_exclude(), "none") +
         " alignment=" + num(int64_t(op->alignment())) +
         " cost_model=" + enumName(op->cost_model(), fb::EnumNameCostModel);
    if (op->cost_table() && op->cost_table()->size())
      o += " cost_table=" + quotedOr(op->cost_table(), "none");
    o += "\n";
    if (const fb::OptimizerDefaults *od = op->optimizer())
      o += "optimizer: lr=" + num(od->lr()) + " momentum=" + num(od->momentum()) +
           " nesterov=" + boolName(od->nesterov()) +
           " weight_decay=" + num(od->weight_decay()) +
           " ns_steps=" + num(int64_t(od->ns_steps())) +
           " ns_coefficients=" + enumName(od->ns_coefficients(), fb::EnumNameNsCoefficients) +
           " lr_scale=" + enumName(od->lr_scale(), fb::EnumNameLrScale) +
           " adamw_lr=" + num(od->adamw_lr()) + " adamw_betas=" + num(od->adamw_beta1()) +
           "," + num(od->adamw_beta2()) + " adamw_eps=" + num(od->adamw_eps()) +
           " adamw_weight_decay=" + num(od->adamw_weight_decay()) + "\n";
  }

  o += "params:\n";
  for (uint32_t i = 0; i < size(plan.params()); ++i) {
    textParam(v, *plan.params()->Get(i), o);
    o += '\n';
  }

  if (v.reached(fb::Stage::partition)) {
    o += "units:\n";
    for (uint32_t i = 0; i < size(plan.units()); ++i) {
      const fb::Unit *u = plan.units()->Get(i);
      o += "unit " + num(int64_t(i)) + " " + str(u->name()) +
           " layer=" + orDash(str(u->layer())) + " cost=" + num(u->cost()) +
           " slot=" + num(int64_t(u->slot())) +
           " params=" + num(int64_t(size(u->params()))) + "\n";
    }
  }

  if (v.reached(fb::Stage::group)) {
    o += "sharding_groups:\n";
    o += "no_comm: " + num(int64_t(size(plan.no_comm()))) + " params\n";
    for (uint32_t i = 0; i < size(plan.no_comm()); ++i)
      o += "  no_comm " + v.paramName(plan.no_comm()->Get(i)) + "\n";
    for (uint32_t i = 0; i < size(plan.comm_groups()); ++i) {
      const fb::CommGroup *g = plan.comm_groups()->Get(i);
      o += "comm " + str(g->key()) + " params=" + nameList(v, g->params()) +
           " replicate_groups=[";
      for (uint32_t j = 0; j < size(g->replicate_groups()); ++j) {
        const fb::RankList *rl = g->replicate_groups()->Get(j);
        if (j)
          o += ',';
        o += '[';
        for (uint32_t k = 0; k < size(rl->ranks()); ++k) {
          if (k)
            o += ',';
          o += num(int64_t(rl->ranks()->Get(k)));
        }
        o += ']';
      }
      o += "]\n";
    }
  }

  if (v.reached(fb::Stage::hooks)) {
    bool laidOut = v.reached(fb::Stage::layout);
    o += "hook_groups:\n";
    for (uint32_t i = 0; i < size(plan.hook_groups()); ++i) {
      const fb::HookGroup *h = plan.hook_groups()->Get(i);
      o += "hook " + str(h->name()) + " params=" + num(int64_t(size(h->params())));
      if (laidOut)
        o += " buffer_bytes=" + num(h->buffer_bytes()) +
             " reduce_buffer_bytes=" + num(h->reduce_buffer_bytes());
      o += '\n';
      if (!laidOut)
        continue;
      for (uint32_t j = 0; j < size(h->segments()); ++j) {
        const fb::Segment *s = h->segments()->Get(j);
        o += "  segment owner=" + num(int64_t(s->owner_rank())) + " slot=(" +
             num(int64_t(s->owner_shard())) + "," + num(int64_t(s->owner_replicate())) +
             ") offset=" + num(s->offset()) + " bytes=" + num(s->bytes()) +
             " reduce_offset=" + num(s->reduce_offset()) +
             " reduce_bytes=" + num(s->reduce_bytes()) +
             " params=" + nameList(v, s->params()) + "\n";
      }
    }
  }

  if (v.reached(fb::Stage::partition) && plan.stats()) {
    const fb::Stats *s = plan.stats();
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
      if (v.reached(fb::Stage::layout))
        o += " max_owners_per_hook_group=" + num(int64_t(s->max_owners_per_hook_group()));
      if (s->optimal())
        o += " optimal";
    }
    o += "\n";
    for (uint32_t i = 0; i < size(s->slot_load()); ++i) {
      int64_t sh = v.slotShard(i), re = v.slotReplicate(i);
      o += "slot " + num(int64_t(i)) + " (" + num(sh) + "," + num(re) +
           ") rank=" + num(v.slotRank(sh, re)) + " load=" + num(s->slot_load()->Get(i)) +
           "\n";
    }
    if (v.reached(fb::Stage::layout))
      for (uint32_t i = 0; i < size(s->ranks()); ++i) {
        const fb::RankFigures *r = s->ranks()->Get(i);
        o += "rank " + num(int64_t(r->rank())) +
             " owned_params=" + num(int64_t(r->owned_params())) +
             " owned_elements=" + num(r->owned_elements()) +
             " master_bytes=" + num(r->master_bytes()) +
             " momentum_bytes=" + num(r->momentum_bytes()) +
             " peak_buffer_bytes=" + num(r->peak_buffer_bytes()) +
             " ns_flops=" + num(r->ns_flops()) +
             " broadcast_send=" + num(r->broadcast_send_bytes()) +
             " broadcast_recv=" + num(r->broadcast_recv_bytes()) +
             " reduce_send=" + num(r->reduce_send_bytes()) +
             " reduce_recv=" + num(r->reduce_recv_bytes()) +
             " replicate_send=" + num(r->replicate_send_bytes()) +
             " replicate_recv=" + num(r->replicate_recv_bytes()) +
             " allreduce=" + num(r->allreduce_bytes()) +
             " gather_send=" + num(r->gather_send_bytes()) +
             " gather_recv=" + num(r->gather_recv_bytes()) +
             " scatter_send=" + num(r->scatter_send_bytes()) +
             " scatter_recv=" + num(r->scatter_recv_bytes()) + "\n";
      }
  }
  return o;
}

// ---------------------------------------------------------------- JSON

namespace {

// A small pretty-printing JSON writer: 2-space indent, keys in call order.
// "Inline" containers (short scalar lists, coordinate pairs) stay on one line.
class Json {
public:
  std::string out;

  void beginObject(bool inl = false) { open('{', inl); }
  void endObject() { close('}'); }
  void beginArray(bool inl = false) { open('[', inl); }
  void endArray() { close(']'); }
  void key(const char *k) {
    sep();
    quote(k);
    out += ": ";
    pendingKey_ = true;
  }
  void value(const std::string &s) {
    startValue();
    quote(s);
  }
  void value(const char *s) { value(std::string(s)); }
  void value(const flatbuffers::String *s) { value(str(s)); }
  void value(int64_t v) {
    startValue();
    out += num(v);
  }
  void value(int32_t v) { value(int64_t(v)); }
  void value(double v) {
    startValue();
    out += std::isfinite(v) ? num(v) : "null";
  }
  void value(bool b) {
    startValue();
    out += b ? "true" : "false";
  }
  void null() {
    startValue();
    out += "null";
  }
  template <typename T> void field(const char *k, T v) {
    key(k);
    value(v);
  }

private:
  struct Frame {
    bool inl, first;
  };
  std::vector<Frame> st_;
  bool pendingKey_ = false;

  void indent() { out.append(2 * st_.size(), ' '); }
  void sep() {
    if (st_.empty())
      return;
    Frame &f = st_.back();
    if (!f.first)
      out += f.inl ? ", " : ",";
    if (!f.inl) {
      out += '\n';
      indent();
    }
    f.first = false;
  }
  void startValue() {
    if (pendingKey_)
      pendingKey_ = false;
    else
      sep();
  }
  void open(char c, bool inl) {
    startValue();
    out += c;
    bool parentInline = !st_.empty() && st_.back().inl;
    st_.push_back({inl || parentInline, true});
  }
  void close(char c) {
    Frame f = st_.back();
    st_.pop_back();
    if (!f.inl && !f.first) {
      out += '\n';
      indent();
    }
    out += c;
  }
  void quote(const std::string &s) {
    out += '"';
    for (unsigned char ch : s) {
      switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
      }
    }
    out += '"';
  }
};

void jsonNames(Json &j, const View &v, const char *k, const flatbuffers::Vector<int32_t> *l) {
  j.key(k);
  j.beginArray();
  for (uint32_t i = 0; i < size(l); ++i)
    j.value(v.paramName(l->Get(i)));
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

void jsonParam(Json &j, const View &v, const fb::Param &q) {
  j.beginObject();
  j.field("name", q.name());
  if (recovered(q)) {
    j.field("source_name", q.source_name());
    j.field("name_note", q.name_note());
  }
  if (q.source_loc() && q.source_loc()->size())
    j.field("source_loc", q.source_loc());
  j.key("shape");
  j.beginArray(true);
  for (uint32_t i = 0; i < size(q.shape()); ++i)
    j.value(q.shape()->Get(i));
  j.endArray();
  j.field("dtype", enumName(q.dtype(), fb::EnumNameDType));
  if (q.conv())
    j.field("conv", true);
  j.key("placements");
  j.beginArray(true);
  for (uint32_t i = 0; i < size(q.placements()); ++i)
    j.value(placementString(*q.placements()->Get(i)));
  j.endArray();
  if (v.reached(fb::Stage::validate) && q.local_shape()) {
    j.key("local_shape");
    j.beginArray(true);
    for (uint32_t i = 0; i < size(q.local_shape()); ++i)
      j.value(q.local_shape()->Get(i));
    j.endArray();
  }
  if (v.reached(fb::Stage::select)) {
    bool muon = isMuon(q);
    j.field("role", enumName(q.role(), fb::EnumNameRole));
    j.field("role_reason", enumName(q.role_reason(), fb::EnumNameRoleReason));
    if (muon) {
      j.key("matrix");
      j.beginObject(true);
      j.field("batch", q.batch());
      j.field("rows", q.rows());
      j.field("cols", q.cols());
      j.endObject();
    }
    if (muon && v.reached(fb::Stage::group)) {
      j.field("group", enumName(q.group(), fb::EnumNameShardingGroupKind));
      if (q.group() == fb::ShardingGroupKind::comm)
        j.field("comm_group", q.comm_group());
      if (gathers(q)) {
        j.key("gather");
        j.beginObject(true);
        j.field("mesh_dim", q.gather_mesh_dim());
        j.field("tensor_dim", q.gather_tensor_dim());
        if (v.reached(fb::Stage::layout))
          j.field("compute_index", q.compute_index());
        j.endObject();
      }
    }
    if (muon && v.reached(fb::Stage::partition)) {
      j.field("layer", q.layer());
      j.field("unit", q.unit());
      j.field("owner_rank", q.owner_rank());
      j.key("owner_slot");
      jsonSlot(j, q.owner_shard(), q.owner_replicate());
      j.field("cost", q.cost());
    }
    if (v.reached(fb::Stage::hooks) && (muon || q.hook_group() >= 0)) {
      j.key("hook");
      if (q.hook_group() >= 0)
        j.value(v.hookName(q.hook_group()));
      else
        j.null();
    }
    if (v.reached(fb::Stage::layout)) {
      if (muon)
        j.field("offset", q.offset());
      j.field("bytes", q.bytes());
      if (muon) {
        j.field("reduce_offset", q.reduce_offset());
        j.field("reduce_bytes", q.reduce_bytes());
      }
    }
  }
  j.endObject();
}

} // namespace

std::string printJson(const fb::Plan &plan) {
  View v(plan);
  Json j;
  j.beginObject();
  j.field("format_version", v.version());
  j.field("producer", plan.producer());
  j.field("fingerprint", hex64(plan.fingerprint()));
  j.field("stage", v.stageName());
  j.field("source", plan.source());
  j.field("model", plan.model_name());

  j.key("mesh");
  j.beginObject();
  j.key("dims");
  j.beginArray();
  if (const fb::Mesh *m = plan.mesh())
    for (uint32_t i = 0; i < size(m->dims()); ++i) {
      j.beginObject(true);
      j.field("name", m->dims()->Get(i)->name());
      j.field("size", m->dims()->Get(i)->size());
      j.endObject();
    }
  j.endArray();
  j.field("world_size", v.worldSize());
  j.field("shard_dim", int64_t(v.shardDim));
  j.field("replicate_dim", int64_t(v.replicateDim));
  j.field("shards", v.G);
  j.field("replicas", v.R);
  j.field("slots", v.slots());
  j.endObject();

  if (const fb::Options *op = plan.options()) {
    j.key("options");
    j.beginObject();
    j.field("mode", enumName(op->mode(), fb::EnumNameMode));
    j.field("replicate_async", op->replicate_async());
    j.field("small_param_threshold", op->small_param_threshold());
    jsonOptString(j, "hook_boundary", op->hook_boundary());
    jsonOptString(j, "muon_include", op->muon_include());
    jsonOptString(j, "muon_exclude", op->muon_exclude());
    j.field("alignment", op->alignment());
    if (const fb::OptimizerDefaults *od = op->optimizer()) {
      j.key("optimizer");
      j.beginObject();
      j.field("lr", od->lr());
      j.field("momentum", od->momentum());
      j.field("nesterov", od->nesterov());
      j.field("weight_decay", od->weight_decay());
      j.field("ns_steps", od->ns_steps());
      j.field("ns_coefficients", enumName(od->ns_coefficients(), fb::EnumNameNsCoefficients));
      j.field("lr_scale", enumName(od->lr_scale(), fb::EnumNameLrScale));
      j.field("adamw_lr", od->adamw_lr());
      j.key("adamw_betas");
      j.beginArray(true);
      j.value(od->adamw_beta1());
      j.value(od->adamw_beta2());
      j.endArray();
      j.field("adamw_eps", od->adamw_eps());
      j.field("adamw_weight_decay", od->adamw_weight_decay());
      j.endObject();
    }
    j.field("cost_model", enumName(op->cost_model(), fb::EnumNameCostModel)); // 1.1
    jsonOptString(j, "cost_table", op->cost_table());
    j.endObject();
  }

  j.key("params");
  j.beginArray();
  for (uint32_t i = 0; i < size(plan.params()); ++i)
    jsonParam(j, v, *plan.params()->Get(i));
  j.endArray();

  if (v.reached(fb::Stage::partition)) {
    j.key("units");
    j.beginArray();
    for (uint32_t i = 0; i < size(plan.units()); ++i) {
      const fb::Unit *u = plan.units()->Get(i);
      j.beginObject();
      j.field("name", u->name());
      j.field("layer", u->layer());
      j.field("cost", u->cost());
      j.field("slot", u->slot());
      j.key("owner_slot");
      jsonSlot(j, v.slotShard(u->slot()), v.slotReplicate(u->slot()));
      j.field("owner_rank", v.slotRank(v.slotShard(u->slot()), v.slotReplicate(u->slot())));
      jsonNames(j, v, "params", u->params());
      j.endObject();
    }
    j.endArray();
  }

  if (v.reached(fb::Stage::group)) {
    j.key("sharding_groups");
    j.beginObject();
    jsonNames(j, v, "no_comm", plan.no_comm());
    j.key("comm");
    j.beginArray();
    for (uint32_t i = 0; i < size(plan.comm_groups()); ++i) {
      const fb::CommGroup *g = plan.comm_groups()->Get(i);
      j.beginObject();
      j.field("key", g->key());
      jsonNames(j, v, "params", g->params());
      j.key("shard_dims");
      j.beginArray(true);
      for (uint32_t k = 0; k < size(g->shard_dims()); ++k)
        j.value(g->shard_dims()->Get(k));
      j.endArray();
      j.key("replicate_mesh_dims");
      j.beginArray(true);
      for (uint32_t k = 0; k < size(g->replicate_mesh_dims()); ++k)
        j.value(g->replicate_mesh_dims()->Get(k));
      j.endArray();
      j.key("replicate_groups");
      j.beginArray(true);
      for (uint32_t k = 0; k < size(g->replicate_groups()); ++k) {
        const fb::RankList *rl = g->replicate_groups()->Get(k);
        j.beginArray(true);
        for (uint32_t r = 0; r < size(rl->ranks()); ++r)
          j.value(rl->ranks()->Get(r));
        j.endArray();
      }
      j.endArray();
      j.endObject();
    }
    j.endArray();
    j.endObject();
  }

  if (v.reached(fb::Stage::hooks)) {
    bool laidOut = v.reached(fb::Stage::layout);
    j.key("hook_groups");
    j.beginArray();
    for (uint32_t i = 0; i < size(plan.hook_groups()); ++i) {
      const fb::HookGroup *h = plan.hook_groups()->Get(i);
      j.beginObject();
      j.field("name", h->name());
      jsonNames(j, v, "params", h->params());
      if (laidOut) {
        j.field("buffer_bytes", h->buffer_bytes());
        j.field("reduce_buffer_bytes", h->reduce_buffer_bytes());
        j.key("segments");
        j.beginArray();
        for (uint32_t k = 0; k < size(h->segments()); ++k) {
          const fb::Segment *s = h->segments()->Get(k);
          j.beginObject();
          j.field("owner_rank", s->owner_rank());
          j.key("owner_slot");
          jsonSlot(j, s->owner_shard(), s->owner_replicate());
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

  if (v.reached(fb::Stage::partition) && plan.stats()) {
    const fb::Stats *s = plan.stats();
    j.key("stats");
    j.beginObject();
    j.field("slots", s->slots());
    j.key("slot_load");
    j.beginArray(true);
    for (uint32_t i = 0; i < size(s->slot_load()); ++i)
      j.value(s->slot_load()->Get(i));
    j.endArray();
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
    if (s->lower_bound_kind() && v.reached(fb::Stage::layout))
      j.field("max_owners_per_hook_group", s->max_owners_per_hook_group());
    if (v.reached(fb::Stage::layout)) {
      j.key("ranks");
      j.beginArray();
      for (uint32_t i = 0; i < size(s->ranks()); ++i) {
        const fb::RankFigures *r = s->ranks()->Get(i);
        j.beginObject();
        j.field("rank", r->rank());
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
        j.endObject();
      }
      j.endArray();
    }
    j.endObject();
  }
  j.endObject();
  j.out += '\n';
  return j.out;
}

// ---------------------------------------------------------------- summary

namespace {

std::string human(double bytes) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f %s", bytes, units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
  return buf;
}

std::string percent(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, 100 * x, std::chars_format::fixed, 2);
  return (r.ec == std::errc() ? std::string(buf, r.ptr) : std::string("?")) + "%";
}

} // namespace

std::string printSummary(const fb::Plan &plan) {
  View v(plan);
  std::string o;
  o += "model: " + orDash(str(plan.model_name())) + " (" + str(plan.source()) + ")\n";
  o += "plan: format " + v.version() + ", stage " + v.stageName() + ", fingerprint " +
       hex64(plan.fingerprint()) + ", " + str(plan.producer()) + "\n";
  o += "mesh: " + v.meshString() + " (" + num(v.worldSize()) + " ranks, " + num(v.G) +
       " shards x " + num(v.R) + " replicas = " + num(v.slots()) + " owner slots)\n";
  const fb::Stats *s = plan.stats();
  if (v.reached(fb::Stage::select)) {
    // Unsigned sums: a plan that was not verified may hold any values.
    uint64_t muon = 0, adamw = 0, muonElems = 0, adamwElems = 0;
    for (uint32_t i = 0; i < size(plan.params()); ++i) {
      const fb::Param *q = plan.params()->Get(i);
      uint64_t n = 1;
      for (uint32_t k = 0; k < size(q->shape()); ++k)
        n *= static_cast<uint64_t>(q->shape()->Get(k));
      (isMuon(*q) ? muon : adamw) += 1;
      (isMuon(*q) ? muonElems : adamwElems) += n;
    }
    auto u = [](uint64_t x) { return std::to_string(x); };
    o += "params: " + u(muon + adamw) + " (" + u(muon) + " muon, " + u(muonElems) +
         " elements; " + u(adamw) + " adamw, " + u(adamwElems) + " elements)\n";
  } else {
    o += "params: " + num(int64_t(size(plan.params()))) + "\n";
  }
  if (v.reached(fb::Stage::hooks))
    o += "hook groups: " + num(int64_t(size(plan.hook_groups()))) + "\n";
  if (v.reached(fb::Stage::partition) && s) {
    o += "units: " + num(int64_t(size(plan.units()))) + " over " + num(int64_t(s->slots())) +
         " slots\n";
    o += "partition: lower_bound=" + num(s->lower_bound()) +
         " max_load=" + num(s->max_load()) + " imbalance=" + fixed4(s->imbalance());
    if (s->optimal() || s->max_load() == s->lower_bound())
      o += " (optimal)";
    if (s->lower_bound_kind())
      o += " bound=" + str(s->lower_bound_kind());
    o += "\n";
  }
  if (v.reached(fb::Stage::layout) && s && size(s->ranks()) > 0) {
    double total = 0, minNs = 0, maxNs = 0;
    int64_t maxMaster = -1, maxMasterRank = 0, maxMoved = -1, maxMovedRank = 0;
    int64_t sentAt = 0, recvAt = 0;
    for (uint32_t i = 0; i < size(s->ranks()); ++i) {
      const fb::RankFigures *r = s->ranks()->Get(i);
      total += r->ns_flops();
      if (i == 0 || r->ns_flops() < minNs)
        minNs = r->ns_flops();
      if (i == 0 || r->ns_flops() > maxNs)
        maxNs = r->ns_flops();
      if (r->master_bytes() > maxMaster) {
        maxMaster = r->master_bytes();
        maxMasterRank = r->rank();
      }
      auto add = [](std::initializer_list<int64_t> xs) {
        uint64_t t = 0; // wraps instead of overflowing on unverified values
        for (int64_t x : xs)
          t += static_cast<uint64_t>(x);
        return static_cast<int64_t>(t);
      };
      int64_t sent = add({r->broadcast_send_bytes(), r->reduce_send_bytes(),
                          r->replicate_send_bytes(), r->allreduce_bytes(),
                          r->gather_send_bytes(), r->scatter_send_bytes()});
      int64_t recv = add({r->broadcast_recv_bytes(), r->reduce_recv_bytes(),
                          r->replicate_recv_bytes(), r->allreduce_bytes(),
                          r->gather_recv_bytes(), r->scatter_recv_bytes()});
      if (add({sent, recv}) > maxMoved) {
        maxMoved = add({sent, recv});
        maxMovedRank = r->rank();
        sentAt = sent;
        recvAt = recv;
      }
    }
    if (total > 0)
      o += "ns share per rank: min=" + percent(minNs / total) +
           " max=" + percent(maxNs / total) + "\n";
    o += "largest master bytes: " + num(maxMaster) + " (" + human(double(maxMaster)) +
         ") on rank " + num(maxMasterRank) + "\n";
    o += "bytes moved per step (busiest rank " + num(maxMovedRank) + "): " + num(maxMoved) +
         " (" + human(double(maxMoved)) + "; sent " + num(sentAt) + ", received " +
         num(recvAt) + ")\n";
  }
  return o;
}

} // namespace dmuon::planfile
