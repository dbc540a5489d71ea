// select: decides each param's role (muon | adamw) and its route (how it
// travels and who steps it, docs/dmuonc.md#routes), records why, and fixes the
// matrix view Muon sees.
#include "Passes.h"

#include "llvm/Support/Regex.h"

namespace dmuon {

namespace {

// Embeddings and output heads stay on AdamW by default (as in the Muon
// reference): a whole path component (the text between dots) named embed*,
// embeddings, wte, wpe or head, or one that ends in _head, _embed,
// _embedding or _embeddings (lm_head, tok_embed, word_embeddings); so do what
// Muon's authors keep there with them although it has a matrix shape:
// positional embeddings (ViT's pos_embedding), class and other learned tokens
// (*_token, [1, 1, C]), relative position bias tables (Swin, T5) and
// layer-scale gains. A word inside a component is not one
// (multi_head_attention, head_proj, channel_token_mix stay matrices).
constexpr const char *kDefaultExclude =
    "(^|\\.)(embed[a-z0-9_]*|embeddings|wte|wpe|head|"
    "[a-z0-9_]*_(head|embed|embedding|embeddings|token)|pos_embed[a-z0-9_]*|"
    "relative_[a-z0-9_]*bias[a-z0-9_]*|layer_scale[a-z0-9_]*)(\\.|$)";

// The default pattern can only match a name containing one of these words;
// checking for them first keeps the regex off almost every param (a 1T-param
// MoE model has ~70,000 Muon matrices).
bool mayMatchDefaultExclude(const std::string &name) {
  for (const char *w : {"embed", "wte", "wpe", "head", "_token", "relative_", "layer_scale"})
    if (name.find(w) != std::string::npos)
      return true;
  return false;
}

// A vector in a matrix's shape: at most one dim above 1 ([C, 1, 1] gains,
// [1, 1, C] tokens, [1, C] rows), so the matrix view Muon would see has a
// side of 1 and orthogonalizing it only normalizes it.
bool vectorLike(const std::vector<int64_t> &shape) {
  int wide = 0;
  for (int64_t d : shape)
    wide += d > 1;
  return wide <= 1;
}

bool compile(const std::string &pattern, const char *flag,
             std::optional<llvm::Regex> &out, Diagnostics &diags) {
  if (pattern.empty())
    return true;
  out.emplace(pattern);
  std::string err;
  if (!out->isValid(err)) {
    diags.error(llvm::Twine("invalid ") + flag + " regex '" + pattern + "': " + err);
    return false;
  }
  return true;
}

Route routeOfPolicy(RoutePolicy policy) {
  switch (policy) {
  case RoutePolicy::owner:
    return Route::owner;
  case RoutePolicy::sharded:
    return Route::sharded;
  case RoutePolicy::replicated:
    return Route::replicated;
  case RoutePolicy::host:
    return Route::host;
  case RoutePolicy::by_size:
    break;
  }
  return Route::owner;
}

// Muon params move with their owner; the rest as the manifest, the policy
// or their size says: large ones (embeddings, heads) in flat shards so no
// single owner carries them, small ones (norms, biases) with their layer's
// owners so a block adds no collectives.
bool selectRoute(Param &p, const Options &o, Diagnostics &diags) {
  if (p.role == Role::muon) {
    if (p.routeOverride && *p.routeOverride != Route::owner && !p.routeOverrideInherited) {
      diags.error(p.loc, "param '" + p.name + "' is a Muon param and cannot take route '" +
                             plan::EnumNameRoute(*p.routeOverride) +
                             "': Muon params always travel the owner route (route applies "
                             "to AdamW params)");
      return false;
    }
    p.route = Route::owner;
    p.routeReason = RouteReason::muon;
  } else if (p.routeOverride) {
    p.route = *p.routeOverride;
    p.routeReason = RouteReason::manifest_override;
  } else if (o.routePolicy != RoutePolicy::by_size) {
    p.route = routeOfPolicy(o.routePolicy);
    p.routeReason = RouteReason::policy;
  } else {
    p.route = p.numElements() >= o.shardedThreshold ? Route::sharded : Route::owner;
    p.routeReason = RouteReason::size;
  }
  return true;
}

} // namespace

bool runSelect(PlanModel &model, Diagnostics &diags) {
  std::optional<llvm::Regex> include, exclude;
  if (!compile(model.options.muonInclude, "--muon-include", include, diags) ||
      !compile(model.options.muonExclude, "--muon-exclude", exclude, diags))
    return false;
  llvm::Regex defaultExclude(kDefaultExclude);

  for (Param &p : model.params) {
    MatrixView v = matrixViewOf(p.shape, p.conv);
    p.batch = v.batch;
    p.rows = v.rows;
    p.cols = v.cols;
    p.matrixOptimizer = model.options.matrixOptimizer;
    if (p.optimizerOverride) {
      p.role = p.optimizerOverride->role;
      p.matrixOptimizer = p.optimizerOverride->matrix;
      p.roleReason = RoleReason::manifest_override;
    } else if (exclude && exclude->match(p.name)) {
      p.role = Role::adamw;
      p.roleReason = RoleReason::exclude_flag;
    } else if (include && include->match(p.name)) {
      p.role = Role::muon;
      p.roleReason = RoleReason::include_flag;
    } else if (p.shape.size() < 2 || vectorLike(p.shape)) {
      p.role = Role::adamw;
      p.roleReason = RoleReason::default_vector;
    } else if (mayMatchDefaultExclude(p.name) && defaultExclude.match(p.name)) {
      p.role = Role::adamw;
      p.roleReason = RoleReason::default_excluded;
    } else {
      p.role = Role::muon;
      p.roleReason = RoleReason::default_matrix;
    }
    selectRoute(p, model.options, diags);
  }
  return !diags.hasErrors();
}

} // namespace dmuon
