// validate: every shape and placement makes sense for the mesh, and every
// Muon param is a matrix (spec 004 §2.1).
#include "Passes.h"

#include <string>

namespace dmuon {

namespace {

std::string shapeStr(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bound on elements per param: keeps byte counts and flop costs exact.
constexpr int64_t kMaxElements = int64_t(1) << 48;

} // namespace

bool runValidate(PlanModel &model, Diagnostics &diags) {
  const Mesh &mesh = model.mesh;
  for (Param &p : model.params) {
    const int ndim = static_cast<int>(p.shape.size());
    const std::string what = "param '" + p.name + "' with shape " + shapeStr(p.shape);

    int64_t elems = 1;
    bool overflow = false, empty = false;
    for (int64_t d : p.shape) {
      if (d <= 0)
        empty = true;
      else if (elems > kMaxElements / d)
        overflow = true;
      else
        elems *= d;
    }
    if (overflow) {
      diags.error(p.loc, what + " has more than 2^48 elements");
      continue;
    }
    if (p.role == Role::Muon && ndim < 2) {
      diags.error(p.loc, what + " cannot use Muon: Muon orthogonalizes matrices and "
                                "needs at least 2 dims; leave it to AdamW");
      continue;
    }
    if (p.role == Role::Muon && empty) {
      diags.error(p.loc, what + " cannot use Muon: it has no elements");
      continue;
    }
    if (p.placements.size() != mesh.dims.size()) {
      diags.error(p.loc, what + " has " + std::to_string(p.placements.size()) +
                             " placements for a " + std::to_string(mesh.dims.size()) +
                             "-dim mesh");
      continue;
    }
    for (size_t i = 0; i < p.placements.size(); ++i) {
      Placement &pl = p.placements[i];
      if (!pl.isShard())
        continue;
      int dim = pl.dim < 0 ? pl.dim + ndim : pl.dim;
      if (dim < 0 || dim >= ndim) {
        diags.error(p.loc, what + ": " + pl.str() + " on mesh dim '" + mesh.dims[i].name +
                               "' is out of range for a " + std::to_string(ndim) +
                               "-D tensor");
        continue;
      }
      pl.dim = dim;
      if (p.shape[dim] < mesh.dims[i].size)
        diags.error(p.loc, what + ": " + pl.str() + " splits dim " + std::to_string(dim) +
                               " of size " + std::to_string(p.shape[dim]) + " over " +
                               std::to_string(mesh.dims[i].size) + " ranks of mesh dim '" +
                               mesh.dims[i].name + "', leaving some shards empty");
    }
  }
  return !diags.hasErrors();
}

} // namespace dmuon
