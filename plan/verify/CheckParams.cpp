// The verifier's checks of params (PlanChecker.h): enums, placements, indices,
// owners and buffer bytes at every stage; the model-parallel fields; and in a
// complete plan what the executor trusts without checking again.
#include "plan/verify/PlanChecker.h"

#include "common/FirstSeenTable.h"
#include "common/MatrixBlocks.h"
#include "common/MatrixOptimizers.h"
#include "common/ParamNames.h"
#include "common/PlanRules.h"
#include "common/Routes.h"
#include "common/ShardChunks.h"
#include "plan/Features.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace dmuon::planfile::detail {

namespace {

// 1.9: a matrix's blocks tile one of its matrix dims, on a rule that
// orthogonalizes (SOAP and Shampoo keep whole-matrix statistics).
std::string blocksError(const plan::Param &q, const Who &who) {
  if (!enumOk(q.block_dim(), plan::BlockDim::MIN, plan::BlockDim::MAX))
    return who + ": unknown block_dim " + std::to_string(static_cast<int>(q.block_dim()));
  if (!enumOk(q.block_source(), plan::BlockSource::MIN, plan::BlockSource::MAX))
    return who + ": unknown block_source " + std::to_string(static_cast<int>(q.block_source()));
  const uint32_t n = q.block_sizes() ? q.block_sizes()->size() : 0;
  if ((n == 0) != (q.block_dim() == plan::BlockDim::none))
    return who + (n ? " has block_sizes but no block_dim" : " has a block_dim but no block_sizes");
  if (n == 0)
    return {};
  if (q.role() != plan::Role::muon || common::preconditions(q.matrix_optimizer()))
    return who + " has blocks; only muon and normuon matrices are orthogonalized as blocks";
  if (n < 2 || n > common::kMaxMatrixBlocks)
    return who + " has " + std::to_string(n) + " blocks; a blocked matrix has 2 to " +
           std::to_string(common::kMaxMatrixBlocks);
  const int64_t extent = q.block_dim() == plan::BlockDim::rows ? q.rows() : q.cols();
  int64_t sum = 0;
  for (int64_t s : *q.block_sizes()) {
    if (s < 1 || s > extent)
      return who + " has a block of size " + std::to_string(s) + " in a matrix of " +
             std::to_string(extent) + " " + plan::EnumNameBlockDim(q.block_dim());
    sum += s;
  }
  if (sum != extent)
    return who + "'s blocks sum to " + std::to_string(sum) + " " +
           plan::EnumNameBlockDim(q.block_dim()) + ", not its " + std::to_string(extent);
  return {};
}

} // namespace

namespace {

using common::kMaxElements;

// Product of non-negative dims, false past kMaxElements (a zero dim makes the
// product 0, but the other dims are still bounded, as dmuonc bounds them).
bool elementCount(const flatbuffers::Vector<int64_t> *dims, int64_t &out) {
  int64_t n = 1;
  bool zero = false;
  if (dims)
    for (int64_t d : *dims) {
      if (d == 0)
        zero = true;
      else if (d < 0 || n > kMaxElements / d)
        return false;
      else
        n *= d;
    }
  out = zero ? 0 : n;
  return true;
}

// a*b*c for factors >= 1, false past kMaxElements.
bool boundedProduct(int64_t a, int64_t b, int64_t c, int64_t &out) {
  if (a < 1 || b < 1 || c < 1 || a > kMaxElements / b || a * b > kMaxElements / c)
    return false;
  out = a * b * c;
  return true;
}

// Whether a Shard or StridedShard on a model-parallel (non-ownership) mesh
// dim chunks the param's local shard: common::shardLayoutOf's rule, without
// building the layout.
bool shardedByModelParallelDim(const plan::Param &q, const plan::Mesh &mesh) {
  const auto *dims = mesh.dims();
  const auto *pls = q.placements();
  for (flatbuffers::uoffset_t d = 0; dims && pls && d < dims->size() && d < pls->size(); ++d) {
    if (static_cast<int>(d) == mesh.shard_dim() || static_cast<int>(d) == mesh.replicate_dim())
      continue;
    const plan::PlacementKind kind = pls->Get(d)->kind();
    if (kind == plan::PlacementKind::shard || kind == plan::PlacementKind::strided_shard)
      return true;
  }
  return false;
}

// A local shape chunked by model-parallel mesh dims: the largest slice of
// DTensor's chunking (common/ShardChunks.h), with no rank left empty.
std::string checkChunkedLocalShape(const plan::Param &q, const plan::Mesh &mesh, const Who &who,
                                   bool bounded) {
  const common::ShardLayout layout = common::shardLayoutOf(q, mesh);
  const std::vector<int64_t> full(q.shape()->begin(), q.shape()->end());
  const std::vector<int64_t> largest = common::largestLocalShape(full, layout);
  for (uint32_t d = 0; bounded && d < q.shape()->size(); ++d) {
    const int64_t local = q.local_shape()->Get(d);
    if (local != largest[d])
      return who + ": local_shape dim " + std::to_string(d) + " is " + std::to_string(local) +
             ", expected " + std::to_string(largest[d]) + " (the largest chunk of its size " +
             std::to_string(full[d]) + " over the model-parallel mesh dims that shard it)";
    if (full[d] > 0 && common::chunkSizesOf(full[d], layout, static_cast<int>(d)).front() == 0)
      return who + ": dim " + std::to_string(d) + " of size " + std::to_string(full[d]) +
             " leaves some ranks an empty shard over the mesh dims that shard it";
    if (!common::stridedSplitsEven(full[d], layout, static_cast<int>(d)))
      return who + ": dim " + std::to_string(d) + " of size " + std::to_string(full[d]) +
             " is not split evenly by its StridedShard placements (each interleaves equal "
             "chunks)";
  }
  return {};
}

std::string matrixStr(int64_t b, int64_t r, int64_t c) {
  return std::to_string(b) + "x" + std::to_string(r) + "x" + std::to_string(c);
}

// The shape and the update rule: dims in range and not negative, every enum
// known, a matrix rule only on a matrix param.
std::string shapeAndRuleError(const plan::Param &q, const Who &who) {
  if (!q.shape())
    return who + " has no shape";
  if (q.shape()->size() > static_cast<uint32_t>(common::kMaxParamDims))
    return who + " has " + std::to_string(q.shape()->size()) + " dims; a param has at most " +
           std::to_string(common::kMaxParamDims);
  for (int64_t d : *q.shape())
    if (d < 0)
      return who + " has a negative dim " + std::to_string(d) + " in its shape";
  if (!enumOk(q.dtype(), plan::DType::MIN, plan::DType::MAX))
    return who + ": unknown dtype " + std::to_string(static_cast<int>(q.dtype()));
  if (!enumOk(q.role(), plan::Role::MIN, plan::Role::MAX))
    return who + ": unknown role " + std::to_string(static_cast<int>(q.role()));
  if (!enumOk(q.role_reason(), plan::RoleReason::MIN, plan::RoleReason::MAX))
    return who + ": unknown role_reason " + std::to_string(static_cast<int>(q.role_reason()));
  if (!enumOk(q.route(), plan::Route::MIN, plan::Route::MAX))
    return who + ": unknown route " + std::to_string(static_cast<int>(q.route()));
  if (!enumOk(q.matrix_optimizer(), plan::MatrixOptimizer::MIN, plan::MatrixOptimizer::MAX))
    return who + ": unknown matrix_optimizer " +
           std::to_string(static_cast<int>(q.matrix_optimizer()));
  if (q.role() != plan::Role::muon && q.matrix_optimizer() != plan::MatrixOptimizer::muon)
    return who + " is an AdamW param with matrix_optimizer " +
           plan::EnumNameMatrixOptimizer(q.matrix_optimizer()) +
           "; only matrix (role muon) params have one";
  return {};
}

// A refresh phase only on a preconditioned matrix (SOAP, Shampoo), within
// its rule's precondition frequency (`od`: the plan's optimizer defaults).
std::string refreshPhaseError(const plan::Param &q, const plan::OptimizerDefaults *od,
                              const Who &who) {
  if (q.refresh_phase() == 0)
    return {};
  const bool soap = q.matrix_optimizer() == plan::MatrixOptimizer::soap;
  const int frequency = !od    ? 1
                        : soap ? od->soap_precondition_frequency()
                               : od->shampoo_precondition_frequency();
  if (q.role() != plan::Role::muon || !common::preconditions(q.matrix_optimizer()))
    return who + " has refresh_phase " + std::to_string(q.refresh_phase()) +
           "; only SOAP and Shampoo matrices have one";
  if (q.refresh_phase() < 0 || q.refresh_phase() >= frequency)
    return who + ": refresh_phase " + std::to_string(q.refresh_phase()) + " is not in [0, " +
           std::to_string(frequency) + ") (its precondition frequency)";
  return {};
}

} // namespace

std::string Checker::checkParams() {
  if (!p_.params())
    return {};
  // The first param of each name, for the duplicate-name check; its slot
  // for a name is prefetched a few params ahead.
  std::optional<common::FirstSeenTable> byName;
  if (complete())
    byName.emplace(p_.params()->size());
  constexpr uint32_t kPrefetchAhead = 16;
  for (uint32_t i = 0; i < p_.params()->size(); ++i) {
    const plan::Param *q = p_.params()->Get(i);
    if (byName && i + kPrefetchAhead < p_.params()->size())
      if (const flatbuffers::String *ahead = p_.params()->Get(i + kPrefetchAhead)->name())
        byName->prefetch(common::FirstSeenTable::hashOf(ahead->string_view()));
    if (std::string e = checkParamName(i, *q, byName); !e.empty())
      return e;
    auto paramName = [&] { return "param '" + q->name()->str() + "'"; };
    if (std::string e = checkParam(*q, Who(paramName)); !e.empty())
      return e;
  }
  return {};
}

// Param i has a name, a valid one, and (in a complete plan, `byName`) the
// only param of that name.
std::string Checker::checkParamName(uint32_t i, const plan::Param &q,
                                    std::optional<common::FirstSeenTable> &byName) {
  if (!q.name() || q.name()->size() == 0)
    return "param #" + std::to_string(i) + " has no name";
  if (std::string why = common::paramNameProblem(q.name()->string_view()); !why.empty())
    return "param #" + std::to_string(i) + ": the name '" +
           common::printableName(q.name()->string_view()) + "' " + why + " (" +
           common::paramNameRuleText() + ")";
  if (!byName)
    return {};
  const std::string_view name = q.name()->string_view();
  const uint32_t first =
      byName->insert(common::FirstSeenTable::hashOf(name), i, [&](uint32_t other) {
        return p_.params()->Get(other)->name()->string_view() == name;
      });
  if (first != i)
    return "params #" + std::to_string(first) + " and #" + std::to_string(i) + " are both named '" +
           q.name()->str() + "'";
  return {};
}

// One named param, field by field, in the order a reader trusts them.
std::string Checker::checkParam(const plan::Param &q, const Who &who) {
  if (std::string e = shapeAndRuleError(q, who); !e.empty())
    return e;
  if (std::string e = refreshPhaseError(q, p_.options() ? p_.options()->optimizer() : nullptr, who);
      !e.empty())
    return e;
  if (std::string e = blocksError(q, who); !e.empty())
    return e;
  if (std::string e = checkRoutingFields(q, who); !e.empty())
    return e;
  if (auto e = checkModelParallel(q, who); !e.empty())
    return e;
  if (auto e = range(who, ": unit", q.unit(), numUnits_, "units", true); !e.empty())
    return e;
  if (auto e = range(who, ": comm_group", q.comm_group(), numComm_, "comm groups", true);
      !e.empty())
    return e;
  if (auto e = range(who, ": hook_group", q.hook_group(), numHooks_, "hook groups", true);
      !e.empty())
    return e;
  if (auto e = checkOwner(q, who); !e.empty())
    return e;
  if (auto e = checkDataDims(q, who); !e.empty())
    return e;
  if (auto e = checkParamBytes(q, who); !e.empty())
    return e;
  if (complete())
    if (auto e = checkCompleteParam(q, who); !e.empty())
      return e;
  return {};
}

// How the param travels: its NS form, route and sharding group, and one
// placement per mesh dim.
std::string Checker::checkRoutingFields(const plan::Param &q, const Who &who) const {
  const uint32_t ndims = static_cast<uint32_t>(mesh_.dims.size());
  if (!enumOk(q.ns_form(), plan::NsForm::MIN, plan::NsForm::MAX))
    return who + ": unknown ns_form " + std::to_string(static_cast<int>(q.ns_form()));
  if (!enumOk(q.route_reason(), plan::RouteReason::MIN, plan::RouteReason::MAX))
    return who + ": unknown route_reason " + std::to_string(static_cast<int>(q.route_reason()));
  // 1.3 plans route every Muon param through its owner (older ones carry
  // no routes).
  if (planHas(p_, PlanFeature::Routes) && q.role() == plan::Role::muon &&
      q.route() != plan::Route::owner)
    return who + " is a Muon param with route " + plan::EnumNameRoute(q.route()) +
           "; Muon params travel the owner route";
  if (!enumOk(q.group(), plan::ShardingGroupKind::MIN, plan::ShardingGroupKind::MAX))
    return who + ": unknown sharding group kind " + std::to_string(static_cast<int>(q.group()));
  if (!enumOk(q.name_origin(), plan::NameOrigin::MIN, plan::NameOrigin::MAX))
    return who + ": unknown name_origin " + std::to_string(static_cast<int>(q.name_origin()));
  if (q.placements()) {
    if (q.placements()->size() != 0 && q.placements()->size() != ndims)
      return who + " has " + std::to_string(q.placements()->size()) +
             " placements but the mesh has " + std::to_string(ndims) + " dims";
    for (const plan::Placement *pl : *q.placements())
      if (!enumOk(pl->kind(), plan::PlacementKind::MIN, plan::PlacementKind::MAX))
        return who + ": unknown placement kind " + std::to_string(static_cast<int>(pl->kind()));
  }
  return {};
}

// The owner slot and rank of an owner-route param (and any param that
// names one), in range and agreeing; the pipeline stage in range.
std::string Checker::checkOwner(const plan::Param &q, const Who &who) const {
  const bool owned = common::effectiveRoute(q) == plan::Route::owner;
  bool hasOwner = q.owner_shard() != -1 || q.owner_replicate() != -1 || q.owner_rank() != -1;
  if (owned && reached(plan::Stage::partition)) {
    if (q.unit() < 0)
      return who + " travels the owner route but has no unit";
    hasOwner = true;
  }
  if (q.pipeline_stage() < 0 || q.pipeline_stage() >= mesh_.P)
    return who + ": pipeline_stage " + std::to_string(q.pipeline_stage()) +
           " out of range (mesh has " + std::to_string(mesh_.P) + " pipeline stage" +
           (mesh_.P == 1 ? ")" : "s)");
  if (!hasOwner)
    return {};
  if (auto e = ownerSlotInRange(who, q.owner_shard(), q.owner_replicate()); !e.empty())
    return e;
  auto ownerName = [&] { return who + ": owner"; };
  if (auto e = dataIndexInRange(ownerName, q.owner_data_index()); !e.empty())
    return e;
  if (auto e = ownerRankInRange(who, q.owner_rank()); !e.empty())
    return e;
  return ownerRankMatchesSlot(who, q.owner_rank(), q.owner_shard(), q.owner_replicate(),
                              q.owner_data_index(), q.pipeline_stage());
}

// The param's byte counts, and its bytes inside its hook group's buffers.
std::string Checker::checkParamBytes(const plan::Param &q, const Who &who) const {
  if (q.bytes() < 0 || q.reduce_bytes() < 0)
    return who + " has negative bytes";
  if (q.bytes() > common::kMaxPlanByteCount || q.reduce_bytes() > common::kMaxPlanByteCount)
    return who + " has more than 2^62 bytes";
  if (q.hook_group() < 0 || q.offset() < 0)
    return {};
  const plan::HookGroup *h = p_.hook_groups()->Get(static_cast<uint32_t>(q.hook_group()));
  if (q.offset() > h->buffer_bytes() || q.bytes() > h->buffer_bytes() - q.offset())
    return who + ": bytes [" + std::to_string(q.offset()) + ", +" + std::to_string(q.bytes()) +
           ") lie outside hook group '" + str(h->name()) + "' buffer of " +
           std::to_string(h->buffer_bytes()) + " bytes";
  if (q.reduce_offset() >= 0 && (q.reduce_offset() > h->reduce_buffer_bytes() ||
                                 q.reduce_bytes() > h->reduce_buffer_bytes() - q.reduce_offset()))
    return who + ": reduce bytes [" + std::to_string(q.reduce_offset()) + ", +" +
           std::to_string(q.reduce_bytes()) + ") lie outside hook group '" + str(h->name()) +
           "' reduce buffer of " + std::to_string(h->reduce_buffer_bytes()) + " bytes";
  return {};
}

// data_dims (1.4 on, from the group stage): the data-carrying dims the param
// is Replicate on, and an owner's data index has coordinates on those only.
std::string Checker::checkDataDims(const plan::Param &q, const Who &who) const {
  if (!planHas(p_, PlanFeature::DataCarryingDims) || !reached(plan::Stage::group))
    return {};
  const std::vector<int> want = expectedDataDims(q);
  const auto *got = q.data_dims();
  if (!got ? !want.empty() : !std::equal(got->begin(), got->end(), want.begin(), want.end())) {
    std::string list;
    for (int d : want) {
      if (!list.empty())
        list += ',';
      list += std::to_string(d);
    }
    return who + ": data_dims do not list the data-carrying mesh dims it is Replicate on [" + list +
           "]";
  }
  // Coordinates of the owner's data index on the dims that shard the param
  // are 0: every coordinate there has its own owner.
  if (q.owner_data_index() <= 0)
    return {};
  const std::vector<int64_t> coord = common::dataCoordsOf(
      mesh_.dims, q.owner_data_index(), [&](int i) { return mesh_.carriesData[i]; });
  for (size_t i = coord.size(); i-- > 0;) {
    const int64_t c = coord[i];
    if (c != 0 && std::find(want.begin(), want.end(), static_cast<int>(i)) == want.end())
      return who + ": owner data index " + std::to_string(q.owner_data_index()) +
             " has coordinate " + std::to_string(c) + " on mesh dim " + std::to_string(i) +
             ", which shards the param";
  }
  return {};
}

// What the executor trusts of a param in a complete plan (checkParams and
// checkModelParallel have accepted it: local_shape has shape's rank, indices
// are in range or -1, owner coordinates are in range).
std::string Checker::checkCompleteParam(const plan::Param &q, const Who &who) {
  int64_t global, local;
  if (!elementCount(q.shape(), global))
    return who + ": shape has more than 2^48 elements";
  if (!elementCount(q.local_shape(), local))
    return who + ": local_shape has more than 2^48 elements";
  const plan::Route route = common::effectiveRoute(q);
  if (route == plan::Route::replicated || route == plan::Route::host) {
    if (q.hook_group() >= 0 || q.unit() >= 0)
      return who + " travels the " + plan::EnumNameRoute(route) +
             " route but has a hook group or unit";
    // The replicated params' gradients share one buffer.
    if (route == plan::Route::replicated)
      adamwElements_ += local;
    if (adamwElements_ > kMaxElements)
      return who + ": AdamW params up to this one have more than 2^48 local elements";
    return {};
  }
  if (route == plan::Route::sharded)
    return checkShardedParam(q, local, who);

  // Ownership: the executor takes the owner slot from the unit.
  if (q.unit() < 0)
    return who + " travels the owner route but has no unit";
  const plan::Unit *u = p_.units()->Get(static_cast<uint32_t>(q.unit()));
  const int64_t slot = u->slot();
  if (slot < 0 || slot >= mesh_.slots())
    return who + ": unit " + std::to_string(q.unit()) + " '" + str(u->name()) + "' slot " +
           std::to_string(slot) + " out of range (plan has " + std::to_string(mesh_.slots()) +
           " owner slots)";
  if (q.owner_shard() != slot % mesh_.G || q.owner_replicate() != slot / mesh_.G)
    return who + ": owner slot (" + std::to_string(q.owner_shard()) + "," +
           std::to_string(q.owner_replicate()) + ") is not its unit's slot " + slotStr(slot);
  if (q.owner_data_index() != u->data_index())
    return who + ": owner data index " + std::to_string(q.owner_data_index()) +
           " is not its unit's " + std::to_string(u->data_index());

  // Placement in its hook group's buffers.
  if (q.hook_group() < 0)
    return who + " travels the owner route but has no hook_group";
  if (q.offset() < 0)
    return who + " travels the owner route but has no offset (" + std::to_string(q.offset()) + ")";
  if (q.reduce_offset() < 0)
    return who + " travels the owner route but has no reduce_offset (" +
           std::to_string(q.reduce_offset()) + ")";
  const int64_t elemBytes = common::dtypeBytes(q.dtype());
  if (q.bytes() != local * elemBytes)
    return who + ": bytes is " + std::to_string(q.bytes()) + ", expected " +
           std::to_string(local * elemBytes) + " (" + std::to_string(local) +
           " local elements of " + plan::EnumNameDType(q.dtype()) + ")";
  if (q.reduce_bytes() != local * common::kReduceElementBytes)
    return who + ": reduce_bytes is " + std::to_string(q.reduce_bytes()) + ", expected " +
           std::to_string(local * common::kReduceElementBytes) + " (" + std::to_string(local) +
           " local elements of f32)";
  if (q.role() != plan::Role::muon)
    return {}; // AdamW on the owner: no matrix view

  // The matrix views the executor runs Newton-Schulz on.
  // The views' text only for a message: the checks run for every param, and
  // formatting a string each time would cost more than they do.
  int64_t n;
  auto lv = [&] { return matrixStr(q.local_batch(), q.local_rows(), q.local_cols()); };
  if (!boundedProduct(q.local_batch(), q.local_rows(), q.local_cols(), n))
    return who + ": local matrix view " + lv() + " has a dim below 1 or more than 2^48 elements";
  if (n != local)
    return who + ": local matrix view " + lv() + " has " + std::to_string(n) +
           " elements but local_shape has " + std::to_string(local);
  auto gv = [&] { return matrixStr(q.batch(), q.rows(), q.cols()); };
  if (!boundedProduct(q.batch(), q.rows(), q.cols(), n))
    return who + ": matrix view " + gv() + " has a dim below 1 or more than 2^48 elements";
  if (n != global)
    return who + ": matrix view " + gv() + " has " + std::to_string(n) +
           " elements but shape has " + std::to_string(global);
  // A comm param's NS runs on local_batch x rows x cols: the local shards of
  // its gather group concatenated along the gathered tensor dim, whose whole
  // size they hold between them (chunks of local_shape's size there, the
  // last ones possibly smaller).
  if (q.group() == plan::ShardingGroupKind::comm) {
    const int64_t k = mesh_.dims[static_cast<size_t>(q.gather_mesh_dim())];
    const int32_t t = q.gather_tensor_dim();
    const bool inRange = t >= 0 && t < static_cast<int32_t>(q.shape()->size()) && q.local_shape() &&
                         t < static_cast<int32_t>(q.local_shape()->size());
    const int64_t whole = inRange ? q.shape()->Get(t) : 0;
    const int64_t chunk = inRange ? q.local_shape()->Get(t) : 0;
    if (!boundedProduct(q.local_batch(), q.rows(), q.cols(), n) || whole <= 0 || n % whole != 0 ||
        n / whole * chunk != local)
      return who + ": gathered matrix view " + matrixStr(q.local_batch(), q.rows(), q.cols()) +
             " (local_batch x rows x cols) is not " + std::to_string(k) + " local shards of " +
             std::to_string(local) + " elements (gather mesh dim " +
             std::to_string(q.gather_mesh_dim()) + ")";
  }
  return {};
}

// A sharded param: G equal flat shards of its local elements, the padded
// values and gradient and this rank's reduce-scatter result inside its hook
// group's buffers.
std::string Checker::checkShardedParam(const plan::Param &q, int64_t local, const Who &who) {
  if (q.hook_group() < 0 || q.unit() >= 0)
    return who + " travels the sharded route but has no hook_group, or has a unit";
  const int64_t shard = common::shardElements(local, mesh_.G);
  if (q.shard_elements() != shard)
    return who + ": shard_elements is " + std::to_string(q.shard_elements()) + ", expected " +
           std::to_string(shard) + " (" + std::to_string(local) + " local elements over " +
           std::to_string(mesh_.G) + " shards)";
  const int64_t padded = shard * mesh_.G;
  const int64_t elemBytes = common::dtypeBytes(q.dtype());
  if (q.bytes() != padded * elemBytes || q.reduce_bytes() != padded * common::kReduceElementBytes)
    return who + ": bytes/reduce_bytes are " + std::to_string(q.bytes()) + "/" +
           std::to_string(q.reduce_bytes()) + ", expected " + std::to_string(padded * elemBytes) +
           "/" + std::to_string(padded * common::kReduceElementBytes) + " (" +
           std::to_string(padded) + " padded elements)";
  const plan::HookGroup *h = p_.hook_groups()->Get(static_cast<uint32_t>(q.hook_group()));
  const int64_t shardBytes = shard * common::kReduceElementBytes;
  if (q.offset() < 0 || q.reduce_offset() < 0 || q.shard_offset() < 0 ||
      q.shard_offset() > h->reduce_buffer_bytes() ||
      shardBytes > h->reduce_buffer_bytes() - q.shard_offset())
    return who + ": shard_offset " + std::to_string(q.shard_offset()) + " (+" +
           std::to_string(shardBytes) + " bytes) lies outside hook group '" + str(h->name()) +
           "' reduce buffer of " + std::to_string(h->reduce_buffer_bytes()) + " bytes";
  return {};
}

// local_shape (from validate on) is a shard of shape; a comm Muon param
// (from group on) gathers over a model-parallel mesh dim that Shards the
// tensor dim it names, and (from layout on) has a compute index on that dim.
std::string Checker::checkModelParallel(const plan::Param &q, const Who &who) {
  const int64_t ndims = static_cast<int64_t>(mesh_.dims.size());
  if (reached(plan::Stage::validate)) {
    if (!q.local_shape())
      return who + " has no local_shape";
    if (q.local_shape()->size() != q.shape()->size())
      return who + " has a local_shape of " + std::to_string(q.local_shape()->size()) +
             " dims for a shape of " + std::to_string(q.shape()->size());
    // The largest slice of DTensor's chunking (common/ShardChunks.h), with
    // no rank left empty; a shape past 2^48 elements is reported below.
    int64_t elements;
    const bool bounded = elementCount(q.shape(), elements);
    if (shardedByModelParallelDim(q, *p_.mesh())) {
      if (auto e = checkChunkedLocalShape(q, *p_.mesh(), who, bounded); !e.empty())
        return e;
    } else {
      // Most params: no model-parallel dim chunks them, so the local shape
      // is the shape (no layout, chunk sets or copies per param).
      for (uint32_t d = 0; bounded && d < q.shape()->size(); ++d)
        if (q.local_shape()->Get(d) != q.shape()->Get(d))
          return who + ": local_shape dim " + std::to_string(d) + " is " +
                 std::to_string(q.local_shape()->Get(d)) + ", expected " +
                 std::to_string(q.shape()->Get(d)) + " (the largest chunk of its size " +
                 std::to_string(q.shape()->Get(d)) +
                 " over the model-parallel mesh dims that shard it)";
    }
  }
  const bool comm = q.role() == plan::Role::muon && q.group() == plan::ShardingGroupKind::comm;
  if (!reached(plan::Stage::group))
    return {};
  if (!comm) {
    if (q.gather_mesh_dim() != -1 || q.compute_index() != -1)
      return who + " is not a comm Muon param but has a gather mesh dim or compute index";
    return {};
  }
  // A comm param's gather is checked once partition has accepted it.
  if (!reached(plan::Stage::partition) && q.gather_mesh_dim() == -1)
    return {};
  const int32_t g = q.gather_mesh_dim();
  if (g < 0 || g >= ndims)
    return who + ": gather_mesh_dim " + std::to_string(g) + " out of range (mesh has " +
           std::to_string(ndims) + " dims)";
  if (g == mesh_.shardDim || g == mesh_.replicateDim)
    return who + ": gather_mesh_dim " + std::to_string(g) + " is a data-parallel mesh dim";
  const int32_t t = q.gather_tensor_dim();
  const plan::Placement *pl =
      q.placements() && static_cast<int64_t>(q.placements()->size()) == ndims
          ? q.placements()->Get(static_cast<uint32_t>(g))
          : nullptr;
  if (t < 0 || t >= static_cast<int64_t>(q.shape()->size()) || !pl ||
      pl->kind() != plan::PlacementKind::shard || pl->dim() != t)
    return who + ": gather_tensor_dim " + std::to_string(t) +
           " is not the tensor dim its gather mesh dim " + std::to_string(g) + " shards";
  if (reached(plan::Stage::layout) && (q.compute_index() < 0 || q.compute_index() >= mesh_.dims[g]))
    return who + ": compute_index " + std::to_string(q.compute_index()) +
           " out of range (gather mesh dim " + std::to_string(g) + " has size " +
           std::to_string(mesh_.dims[g]) + ")";
  return {};
}

// 1.7: the input's tensors that are not parameters, listed for readers.
std::string Checker::checkBuffers() {
  const auto *buffers = p_.buffers();
  for (flatbuffers::uoffset_t i = 0; buffers && i < buffers->size(); ++i) {
    const plan::Buffer *b = buffers->Get(i);
    const std::string who = "buffer " + std::to_string(i);
    if (!b || !b->name() || b->name()->size() == 0)
      return who + " has no name";
    if (b->shape())
      for (int64_t d : *b->shape())
        if (d < 0)
          return who + " ('" + b->name()->str() + "') has a negative dim " + std::to_string(d);
  }
  return {};
}

} // namespace dmuon::planfile::detail
