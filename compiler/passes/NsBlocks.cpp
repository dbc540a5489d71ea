// Matrix blocks (docs/dmuonc.md#blocks): which matrices are orthogonalized
// as blocks, and their sizes, checked against each matrix view. A param's
// blocks come from its manifest (`heads`, `ns_split`), else the first
// --ns-split whose regex matches its name, else, for a fused attention
// in_proj_weight [3E, E] (nn.MultiheadAttention), its Q, K and V rows.
#include "Passes.h"
#include "common/MatrixBlocks.h"
#include "common/MatrixOptimizers.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Regex.h"

#include <optional>
#include <string>

namespace dmuon {

namespace {

const char *dimName(plan::BlockDim dim) { return dim == plan::BlockDim::cols ? "cols" : "rows"; }

// What gave the blocks, as a diagnostic names it.
std::string originOf(const Param &p, const MatrixBlocks &b, const Options &o, int rule) {
  switch (b.source) {
  case plan::BlockSource::manifest_heads:
    return "'heads = " + std::to_string(b.count) + "' of param '" + p.name + "'";
  case plan::BlockSource::manifest_split:
    return "'ns_split' of param '" + p.name + "'";
  case plan::BlockSource::split_flag:
    return "--ns-split=" + o.blockRules[rule].text + " (param '" + p.name + "')";
  default:
    return "the Q, K, V split of '" + p.name + "'";
  }
}

bool isFusedInProj(const Param &p) {
  const std::string_view suffix = "in_proj_weight";
  return p.name.size() >= suffix.size() &&
         p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         p.shape.size() == 2 && p.rows == 3 * p.cols;
}

// Adds `count` blocks of p's to the model's `total`; false, reported once at
// the param that passes common::kMaxModelMatrixBlocks (the limit holds over
// the whole model, not only per matrix: 20,000 matrices of 65,536 heads
// would take the compiler gigabytes and overflow the plan).
bool withinBudget(int64_t &total, size_t count, const Param &p, const MatrixBlocks &b,
                  bool fromManifest, Diagnostics &diags) {
  total += static_cast<int64_t>(count);
  if (total <= common::kMaxModelMatrixBlocks)
    return true;
  const std::string msg = "param '" + p.name + "': the blocked matrices up to this one hold " +
                          std::to_string(total) + " blocks, more than the " +
                          std::to_string(common::kMaxModelMatrixBlocks) +
                          " a model may have in all (a plan stores 8 bytes per block)";
  if (fromManifest && b.loc.isValid())
    diags.error(b.loc, msg);
  else
    diags.error(msg);
  return false;
}

} // namespace

bool resolveMatrixBlocks(PlanModel &model, Diagnostics &diags) {
  const Options &o = model.options;
  std::vector<llvm::Regex> rules;
  for (const Options::BlockRule &r : o.blockRules)
    rules.emplace_back(r.pattern);
  std::vector<bool> ruleUsed(rules.size(), false);
  // A repeat block's copies share their manifest key: one report for it.
  llvm::DenseSet<const char *> reported;
  MatrixBlocks inProj;
  inProj.dim = plan::BlockDim::rows;
  inProj.count = 3;
  inProj.source = plan::BlockSource::in_proj;
  // The blocks so far, against the model's budget; and the last resolved
  // blocks, which a repeat block's next copy shares.
  int64_t total = 0;
  const MatrixBlocks *lastSpec = nullptr;
  int64_t lastExtent = -1;
  std::shared_ptr<const MatrixBlocks> lastResolved;

  for (Param &p : model.params) {
    const std::shared_ptr<const MatrixBlocks> own = std::move(p.blocks);
    p.blocks = nullptr;
    const MatrixBlocks *spec = own.get();
    int rule = -1;
    // Flags pick matrices by name: an AdamW param they match is not one.
    for (size_t k = 0; k < rules.size() && !spec; ++k)
      if (rules[k].match(p.name)) {
        ruleUsed[k] = true;
        if (p.role == Role::muon) {
          rule = static_cast<int>(k);
          spec = &o.blockRules[k].blocks;
        }
      }
    if (!spec && o.splitInProj && p.role == Role::muon &&
        !common::preconditions(p.matrixOptimizer) && isFusedInProj(p))
      spec = &inProj;
    if (!spec)
      continue;
    const bool fromManifest = spec == own.get();
    const MatrixBlocks &b = *spec;
    auto fail = [&](const std::string &why) {
      const std::string msg = originOf(p, b, o, rule) + ": " + why;
      if (!fromManifest)
        diags.error(msg);
      else if (reported.insert(b.loc.getPointer()).second)
        diags.error(b.loc.isValid() ? b.loc : p.loc, msg);
    };
    if (p.role != Role::muon) {
      fail("the param is AdamW (" + std::string(plan::EnumNameRoleReason(p.roleReason)) +
           "); blocks are orthogonalized apart by a matrix optimizer (muon or normuon)");
      continue;
    }
    if (common::preconditions(p.matrixOptimizer)) {
      fail(std::string("blocks run with muon and normuon; ") +
           plan::EnumNameMatrixOptimizer(p.matrixOptimizer) +
           " keeps statistics of the whole matrix");
      continue;
    }
    const int64_t extent = b.dim == plan::BlockDim::cols ? p.cols : p.rows;
    const std::string matrix = std::to_string(extent) + " " + dimName(b.dim) + " (matrix view " +
                               std::to_string(p.batch) + "x" + std::to_string(p.rows) + "x" +
                               std::to_string(p.cols) + ")";
    if (lastResolved && spec == lastSpec && extent == lastExtent) {
      if (!withinBudget(total, lastResolved->sizes.size(), p, b, fromManifest, diags))
        return false;
      p.blocks = lastResolved;
      continue;
    }
    lastSpec = spec;
    lastExtent = extent;
    lastResolved = nullptr;
    auto resolved = std::make_shared<MatrixBlocks>(b);
    resolved->count = 0;
    if (b.count > 0) {
      if (b.count > extent || extent % b.count != 0) {
        fail(std::to_string(b.count) + " equal blocks do not divide its " + matrix);
        continue;
      }
      if (b.count > common::kMaxMatrixBlocks) {
        fail(std::to_string(b.count) + " blocks are more than the " +
             std::to_string(common::kMaxMatrixBlocks) + " a matrix may have");
        continue;
      }
      resolved->sizes.assign(static_cast<size_t>(b.count), extent / b.count);
    } else {
      if (static_cast<int64_t>(b.sizes.size()) > common::kMaxMatrixBlocks) {
        fail(std::to_string(b.sizes.size()) + " blocks are more than the " +
             std::to_string(common::kMaxMatrixBlocks) + " a matrix may have");
        continue;
      }
      int64_t sum = 0;
      for (int64_t s : b.sizes)
        sum += s; // each <= 2^31, at most 2^16 of them
      if (sum != extent) {
        fail("the block sizes sum to " + std::to_string(sum) + ", not its " + matrix);
        continue;
      }
    }
    // One block is the whole matrix: the plan says nothing.
    if (resolved->sizes.size() > 1) {
      if (!withinBudget(total, resolved->sizes.size(), p, b, fromManifest, diags))
        return false;
      p.blocks = lastResolved = std::move(resolved);
    }
  }
  for (size_t k = 0; k < rules.size(); ++k)
    if (!ruleUsed[k])
      diags.warning("--ns-split=" + o.blockRules[k].text + " matches no param");
  return !diags.hasErrors();
}

} // namespace dmuon
