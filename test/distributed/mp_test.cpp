// Model-parallel Muon params in libdmuon on the MPI backend, run
// under mpirun by ctest on meshes with a model-parallel dim:
// dp_shard=2,tp=2 (4 ranks), dp_replicate=2,dp_shard=2,tp=2 and
// dp_shard=4,ep=2 (8 ranks).
//
// The model (mp-tp.toml / mp-ep.toml), in plain C++ below, per row b:
//   h      = embed · x_b                                   embed.weight [D, I]   adamw
//   for l in 0..L-1 (layers.l):
//     n    = rmsnorm(h) ⊙ norm                             norm.weight  [D]      adamw
//     z    = silu(up · n)                                  up.weight    [H, D]   tp Shard(0)
//     h    = h + down · z                                  down.weight  [D, H]   tp Shard(1)
//   e      = (global row index) mod E   (a fixed router)
//   h      = h + W_eᵀ silu(W_e · h)                        moe.experts.w [E,F,D] tp/ep Shard(0)
//   y      = head · h                                      head.weight  [O, D]   adamw
//   loss   = mean over rows and outputs of (y − t)²
//
// Model parallelism on the host is simulated honestly: the runtime holds only
// each rank's local shards; for forward a rank reassembles the full params by
// MPI_Allgather of its local param views over its model-parallel group (the
// ranks that differ only in the tp/ep coordinate), runs the full forward and
// backward on its data-parallel slice of the global batch (the ranks of one
// model-parallel group share the slice), and writes its local slice of each
// gradient into the runtime's grad views.
//
// Checks, over 10-step runs:
//   * after every step, per model-parallel coordinate: I1 (is_owner iff the
//     rank's (shard, replicate) is the owner slot: every model-parallel
//     coordinate of the slot owns), I2 (owned data on the owner's shard
//     column), I3 (after finish_backward only owners hold reduced grads), I4
//     (after synchronize the owned checksums agree down each shard column at
//     the same model-parallel coordinate);
//   * per step, the bytes each rank sent and received per collective kind
//     (gather and scatter included) equal dmuon_runtime_planned_counters, and
//     the plan's figures agree with what the param table and the accounting
//     rule of docs/plan-format.md give;
//   * after 10 steps every param, reassembled from its shards (gather_param
//     on each rank, then MPI_Allgather over the model-parallel group,
//     concatenated along the sharded dim), equals a single-process Muon+AdamW
//     run of the full model on the full global batch within 1e-4 relative
//     (max abs diff / max abs value); the loss at step 0 agrees within 1e-6;
//   * Z2/sync and async without synchronize between steps give bit-identical
//     losses and params to Z3/async;
//   * bind_param / gather_param of a sharded param with its global numel are
//     refused (INVALID_ARGUMENT): the runtime takes and gives local shards.
//
// usage: mpirun -n N dmuon-mp-test --plan P --layout tp|ep
// The layout names which params are sharded on the model-parallel dim:
//   tp: layers.N.up.weight on tensor dim 0, layers.N.down.weight on dim 1,
//       moe.experts.w on dim 0;  ep: moe.experts.w on dim 0.
// Exits 0 when every check passed on every rank; failures are printed as
// "rank R: FAIL: ..." lines.
#include "dmuon/dmuon.h"
#include "dmuon/dmuon.hpp"
#include "kernels/cpu/MuonKernels.h"

#include "MpiCheck.h"
#include "ReferenceHyper.h"

#include <mpi.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kSteps = 10;
constexpr double kRelTol = 1e-4;
constexpr uint64_t kSeed = 11;

// The hyper-parameters compiled into the plans (CMakeLists.txt passes them
// to dmuonc); the runtime takes them from the plan, the reference from here.

using mpicheck::fail;
using reference::adamwHyper;
using reference::muonHyper;
using mpicheck::gFailures;
using mpicheck::gRank;
using mpicheck::gWorld;
using mpicheck::globalFailures;
using mpicheck::info;

// ------------------------------------------------------------------ model
struct Config {
  int64_t in = 16, dim = 32, hidden = 64, out = 8, experts = 4, expertHidden = 16, layers = 2;
  int64_t globalBatch = 64;
};

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 1;
  int shardDim = -1; // tensor dim sharded over the model-parallel mesh dim, -1 if none
};

std::vector<Spec> modelSpecs(const Config &c, const std::string &layout) {
  const bool tp = layout == "tp", cp = layout == "cp";
  std::vector<Spec> s;
  s.push_back({"embed.weight", {c.dim, c.in}, 1, -1});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    s.push_back({p + "norm.weight", {c.dim}, 1, -1});
    s.push_back({p + "up.weight", {c.hidden, c.dim}, 1, tp ? 0 : -1});
    s.push_back({p + "down.weight", {c.dim, c.hidden}, 1, tp ? 1 : -1});
  }
  s.push_back({"moe.experts.w", {c.experts, c.expertHidden, c.dim}, 1, cp ? -1 : 0});
  s.push_back({"head.weight", {c.out, c.dim}, 1, -1});
  for (Spec &x : s)
    for (int64_t d : x.shape)
      x.numel *= d;
  return s;
}

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from a key.
float uniform(uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t h = splitmix(splitmix(splitmix(a) ^ b) ^ c);
  return static_cast<float>(static_cast<double>(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

uint64_t nameKey(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s)
    h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

std::vector<float> initParam(const Spec &s) {
  std::vector<float> v(static_cast<size_t>(s.numel));
  const uint64_t key = nameKey(s.name) ^ kSeed;
  const bool norm = s.shape.size() == 1;
  const float scale = norm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(s.shape.back()));
  for (int64_t i = 0; i < s.numel; ++i) {
    const float u = uniform(key, 1, static_cast<uint64_t>(i));
    v[static_cast<size_t>(i)] = norm ? 1.0f + scale * u : scale * u;
  }
  return v;
}

// Rows [first, first + count) of step `step`'s global batch: x uniform, t
// from a fixed random teacher t = T2 · tanh(T1 · x).
void makeBatch(const Config &c, int64_t step, int64_t first, int64_t count, std::vector<float> &x,
               std::vector<float> &t) {
  const int64_t th = 24;
  x.assign(static_cast<size_t>(count * c.in), 0.0f);
  t.assign(static_cast<size_t>(count * c.out), 0.0f);
  std::vector<float> hid(static_cast<size_t>(th));
  for (int64_t b = 0; b < count; ++b) {
    const uint64_t row = static_cast<uint64_t>(first + b);
    float *xb = &x[static_cast<size_t>(b * c.in)];
    for (int64_t i = 0; i < c.in; ++i)
      xb[i] = uniform(kSeed ^ 0xda7a, static_cast<uint64_t>(step) * 100003u + row,
                      static_cast<uint64_t>(i));
    for (int64_t j = 0; j < th; ++j) {
      float a = 0;
      for (int64_t i = 0; i < c.in; ++i)
        a += uniform(kSeed ^ 0x7ea1, static_cast<uint64_t>(j), static_cast<uint64_t>(i)) * xb[i];
      hid[static_cast<size_t>(j)] = std::tanh(a);
    }
    for (int64_t o = 0; o < c.out; ++o) {
      float a = 0;
      for (int64_t j = 0; j < th; ++j)
        a += uniform(kSeed ^ 0x7ea2, static_cast<uint64_t>(o), static_cast<uint64_t>(j)) *
             hid[static_cast<size_t>(j)];
      t[static_cast<size_t>(b * c.out + o)] = 0.5f * a;
    }
  }
}

using Tensors = std::map<std::string, std::vector<float>>;

float sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }

// y = W x for a row-major W [m, n].
void matvec(const float *W, const float *x, float *y, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    float s = 0;
    for (int64_t j = 0; j < n; ++j)
      s += W[i * n + j] * x[j];
    y[i] = s;
  }
}
// y += Wᵀ x for W [m, n], x [m], y [n].
void matvecTAdd(const float *W, const float *x, float *y, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      y[j] += W[i * n + j] * x[i];
}
// dW += a ⊗ b for dW [m, n].
void outerAdd(float *dW, const float *a, const float *b, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      dW[i * n + j] += a[i] * b[j];
}

// One forward and backward over `count` rows whose global indices start at
// `first` (for the router); returns the mean loss of these rows and adds the
// gradient of that mean into `g` (full tensors, pre-sized).
double forwardBackward(const Config &c, const Tensors &p, Tensors &g, const float *x,
                       const float *t, int64_t count, int64_t first) {
  const int64_t D = c.dim, H = c.hidden, F = c.expertHidden, L = c.layers;
  const float eps = 1e-6f;
  std::vector<std::vector<float>> hs(static_cast<size_t>(L + 1), std::vector<float>(D));
  std::vector<std::vector<float>> nrm(static_cast<size_t>(L), std::vector<float>(D)),
      nn(static_cast<size_t>(L), std::vector<float>(D)),
      as(static_cast<size_t>(L), std::vector<float>(H)),
      zs(static_cast<size_t>(L), std::vector<float>(H));
  std::vector<float> rinv(static_cast<size_t>(L));
  std::vector<float> hm(D), a2(F), z2(F), y(c.out), dy(c.out), dh(D), dz(H), da(H), dn(D), dz2(F),
      da2(F), dnrm(D);
  double loss = 0;
  const float *embed = p.at("embed.weight").data();
  const float *head = p.at("head.weight").data();
  const float *experts = p.at("moe.experts.w").data();
  for (int64_t b = 0; b < count; ++b) {
    const float *xb = x + b * c.in;
    const float *tb = t + b * c.out;
    matvec(embed, xb, hs[0].data(), D, c.in);
    for (int64_t l = 0; l < L; ++l) {
      const std::string pre = "layers." + std::to_string(l) + ".";
      const float *norm = p.at(pre + "norm.weight").data();
      const float *up = p.at(pre + "up.weight").data();
      const float *down = p.at(pre + "down.weight").data();
      const std::vector<float> &h = hs[static_cast<size_t>(l)];
      float ms = 0;
      for (int64_t d = 0; d < D; ++d)
        ms += h[d] * h[d];
      const float r = 1.0f / std::sqrt(ms / static_cast<float>(D) + eps);
      rinv[static_cast<size_t>(l)] = r;
      for (int64_t d = 0; d < D; ++d) {
        nrm[l][d] = h[d] * r;
        nn[l][d] = nrm[l][d] * norm[d];
      }
      matvec(up, nn[l].data(), as[l].data(), H, D);
      for (int64_t k = 0; k < H; ++k)
        zs[l][k] = as[l][k] * sigmoid(as[l][k]);
      std::vector<float> &hn = hs[static_cast<size_t>(l + 1)];
      matvec(down, zs[l].data(), hn.data(), D, H);
      for (int64_t d = 0; d < D; ++d)
        hn[d] += h[d];
    }
    // MoE: the fixed router sends global row i to expert i mod E.
    const int64_t e = (first + b) % c.experts;
    const float *W = experts + e * F * D;
    const std::vector<float> &hL = hs[static_cast<size_t>(L)];
    matvec(W, hL.data(), a2.data(), F, D);
    for (int64_t f = 0; f < F; ++f)
      z2[f] = a2[f] * sigmoid(a2[f]);
    hm = hL;
    matvecTAdd(W, z2.data(), hm.data(), F, D);
    matvec(head, hm.data(), y.data(), c.out, D);
    for (int64_t o = 0; o < c.out; ++o) {
      const float diff = y[o] - tb[o];
      loss += static_cast<double>(diff) * diff;
      dy[o] = 2.0f * diff / static_cast<float>(count * c.out);
    }
    // Backward.
    outerAdd(g.at("head.weight").data(), dy.data(), hm.data(), c.out, D);
    std::fill(dh.begin(), dh.end(), 0.0f);
    matvecTAdd(head, dy.data(), dh.data(), c.out, D);
    float *dW = g.at("moe.experts.w").data() + e * F * D;
    outerAdd(dW, z2.data(), dh.data(), F, D); // from h += Wᵀ z2
    matvec(W, dh.data(), dz2.data(), F, D);
    for (int64_t f = 0; f < F; ++f) {
      const float s = sigmoid(a2[f]);
      da2[f] = dz2[f] * s * (1.0f + a2[f] * (1.0f - s));
    }
    outerAdd(dW, da2.data(), hL.data(), F, D); // from a2 = W h
    matvecTAdd(W, da2.data(), dh.data(), F, D);
    for (int64_t l = L - 1; l >= 0; --l) {
      const std::string pre = "layers." + std::to_string(l) + ".";
      const float *norm = p.at(pre + "norm.weight").data();
      const float *up = p.at(pre + "up.weight").data();
      const float *down = p.at(pre + "down.weight").data();
      outerAdd(g.at(pre + "down.weight").data(), dh.data(), zs[l].data(), D, H);
      std::fill(dz.begin(), dz.end(), 0.0f);
      matvecTAdd(down, dh.data(), dz.data(), D, H);
      for (int64_t k = 0; k < H; ++k) {
        const float s = sigmoid(as[l][k]);
        da[k] = dz[k] * s * (1.0f + as[l][k] * (1.0f - s));
      }
      outerAdd(g.at(pre + "up.weight").data(), da.data(), nn[l].data(), H, D);
      std::fill(dn.begin(), dn.end(), 0.0f);
      matvecTAdd(up, da.data(), dn.data(), H, D);
      float *dnorm = g.at(pre + "norm.weight").data();
      float dot = 0;
      for (int64_t d = 0; d < D; ++d) {
        dnorm[d] += dn[d] * nrm[l][d];
        dnrm[d] = dn[d] * norm[d];
        dot += dnrm[d] * nrm[l][d];
      }
      const float r = rinv[static_cast<size_t>(l)];
      const float mean = dot / static_cast<float>(D);
      for (int64_t d = 0; d < D; ++d)
        dh[d] += r * (dnrm[d] - nrm[l][d] * mean); // residual + rmsnorm
    }
    outerAdd(g.at("embed.weight").data(), dh.data(), xb, D, c.in);
  }
  return loss / static_cast<double>(count * c.out);
}

// --------------------------------------------------- shards of a tensor
// The `k`-th of `parts` equal slices of a tensor along dim `dim`.
std::vector<float> sliceOf(const std::vector<float> &full, const std::vector<int64_t> &shape,
                           int dim, int parts, int k) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d)
    if (d < dim)
      outer *= shape[static_cast<size_t>(d)];
    else if (d > dim)
      inner *= shape[static_cast<size_t>(d)];
  const int64_t chunk = shape[static_cast<size_t>(dim)] / parts;
  const int64_t row = chunk * inner, fullRow = shape[static_cast<size_t>(dim)] * inner;
  std::vector<float> out(static_cast<size_t>(outer * row));
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(&out[static_cast<size_t>(o * row)],
                &full[static_cast<size_t>(o * fullRow + k * row)],
                static_cast<size_t>(row) * sizeof(float));
  return out;
}

// The inverse: `chunks` holds `parts` local slices back to back.
std::vector<float> concatOf(const std::vector<float> &chunks, const std::vector<int64_t> &shape,
                            int dim, int parts) {
  int64_t outer = 1, inner = 1, numel = 1;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    numel *= shape[static_cast<size_t>(d)];
    if (d < dim)
      outer *= shape[static_cast<size_t>(d)];
    else if (d > dim)
      inner *= shape[static_cast<size_t>(d)];
  }
  const int64_t chunk = shape[static_cast<size_t>(dim)] / parts;
  const int64_t row = chunk * inner, fullRow = shape[static_cast<size_t>(dim)] * inner;
  const int64_t local = outer * row;
  std::vector<float> out(static_cast<size_t>(numel));
  for (int k = 0; k < parts; ++k)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(&out[static_cast<size_t>(o * fullRow + k * row)],
                  &chunks[static_cast<size_t>(k * local + o * row)],
                  static_cast<size_t>(row) * sizeof(float));
  return out;
}

// --------------------------------------------------------------- the mesh
struct Topology {
  dmuon_mesh_info_t mesh{};
  std::vector<int> coord; // this rank's, row-major over the mesh dims
  int shard = 0, replicate = 0, G = 1, R = 1;
  int mpDim = -1, mpSize = 1, mp = 0; // the model-parallel dim, its size, my coordinate
  bool mpCarriesData = false;         // its coordinates see different tokens (ep, cp)
  std::string mpName = "none";
  MPI_Comm mpComm = MPI_COMM_NULL; // ranks differing only in the mp coordinate, ordered by it
  std::string text;

  int rankOf(const std::vector<int> &c) const {
    int r = 0;
    for (int d = 0; d < mesh.ndim; ++d)
      r = r * mesh.dim_sizes[d] + c[static_cast<size_t>(d)];
    return r;
  }
  std::vector<int> coordOf(int rank) const {
    std::vector<int> c(static_cast<size_t>(mesh.ndim));
    for (int d = mesh.ndim - 1; d >= 0; --d) {
      c[static_cast<size_t>(d)] = rank % mesh.dim_sizes[d];
      rank /= mesh.dim_sizes[d];
    }
    return c;
  }
  // The rank at (shard, replicate) with model-parallel coordinate `m`.
  int rankAt(int s, int r, int m) const {
    std::vector<int> c(static_cast<size_t>(mesh.ndim), 0);
    if (mesh.shard_dim >= 0)
      c[static_cast<size_t>(mesh.shard_dim)] = s;
    if (mesh.replicate_dim >= 0)
      c[static_cast<size_t>(mesh.replicate_dim)] = r;
    if (mpDim >= 0)
      c[static_cast<size_t>(mpDim)] = m;
    return rankOf(c);
  }
  int mpOf(int rank) const { return mpDim >= 0 ? coordOf(rank)[static_cast<size_t>(mpDim)] : 0; }
  int shardOf(int rank) const {
    return mesh.shard_dim >= 0 ? coordOf(rank)[static_cast<size_t>(mesh.shard_dim)] : 0;
  }
  int replicateOf(int rank) const {
    return mesh.replicate_dim >= 0 ? coordOf(rank)[static_cast<size_t>(mesh.replicate_dim)] : 0;
  }
};

Topology makeTopology(const dmuon::Plan &plan) {
  Topology t;
  t.mesh = plan.mesh();
  t.G = t.mesh.num_shards;
  t.R = t.mesh.num_replicas;
  t.coord = t.coordOf(gRank);
  t.shard = t.shardOf(gRank);
  t.replicate = t.replicateOf(gRank);
  for (int d = 0; d < t.mesh.ndim; ++d) {
    if (d > 0)
      t.text += ",";
    t.text += std::string(t.mesh.dim_names[d]) + "=" + std::to_string(t.mesh.dim_sizes[d]);
    if (d == t.mesh.shard_dim || d == t.mesh.replicate_dim)
      continue;
    if (t.mpDim >= 0)
      throw std::runtime_error("the test handles one model-parallel mesh dim");
    t.mpDim = d;
    t.mpSize = t.mesh.dim_sizes[d];
    t.mp = t.coord[static_cast<size_t>(d)];
    t.mpName = t.mesh.dim_names[d];
    t.mpCarriesData = t.mesh.dim_carries_data[d] != 0;
  }
  // Color: my rank with the mp coordinate at 0; key: the mp coordinate.
  std::vector<int> c0 = t.coord;
  if (t.mpDim >= 0)
    c0[static_cast<size_t>(t.mpDim)] = 0;
  MPI_Comm_split(MPI_COMM_WORLD, t.rankOf(c0), t.mp, &t.mpComm);
  int size = 0, rank = 0;
  MPI_Comm_size(t.mpComm, &size);
  MPI_Comm_rank(t.mpComm, &rank);
  if (size != t.mpSize || rank != t.mp)
    throw std::runtime_error("model-parallel communicator: size/rank mismatch");
  return t;
}

// ---------------------------------------------------------------- reference
struct Trajectory {
  std::vector<float> losses; // global mean loss per step
  std::vector<double> norms; // global gradient norm per step
  Tensors initial, final;    // full params
};

// Single process: Muon (whole matrices; the experts batched) + AdamW on the
// full model and the full global batch.
Trajectory runReference(const dmuon::Plan &plan, const Config &cfg,
                        const std::vector<Spec> &specs) {
  namespace k = dmuon::kernels;
  const k::MuonHyper mh = muonHyper();
  const k::AdamWHyper ah = adamwHyper();
  Tensors p, g, m, v;
  for (const Spec &s : specs) {
    p[s.name] = initParam(s);
    g[s.name].assign(static_cast<size_t>(s.numel), 0.0f);
    m[s.name].assign(static_cast<size_t>(s.numel), 0.0f);
    v[s.name].assign(static_cast<size_t>(s.numel), 0.0f);
  }
  Trajectory tr;
  tr.initial = p;
  std::vector<float> x, t;
  k::NsWorkspace ws;
  for (int step = 0; step < kSteps; ++step) {
    makeBatch(cfg, step, 0, cfg.globalBatch, x, t);
    for (auto &[name, grad] : g)
      std::fill(grad.begin(), grad.end(), 0.0f);
    tr.losses.push_back(
        static_cast<float>(forwardBackward(cfg, p, g, x.data(), t.data(), cfg.globalBatch, 0)));
    double squares = 0;
    for (const auto &[name, grad] : g)
      for (float e : grad)
        squares += static_cast<double>(e) * e;
    tr.norms.push_back(std::sqrt(squares));
    for (const Spec &s : specs) {
      const dmuon_param_info_t info = plan.param(plan.findParam(s.name));
      float *pv = p[s.name].data();
      if (info.role == DMUON_ROLE_MUON) {
        const int64_t batch = s.shape.size() == 3 ? s.shape[0] : 1;
        const int64_t rows = s.shape[s.shape.size() - 2], cols = s.shape.back();
        k::muonStep(pv, m[s.name].data(), g[s.name].data(), batch, rows, cols, mh, ws);
      } else {
        k::adamwStep(pv, m[s.name].data(), v[s.name].data(), g[s.name].data(), s.numel, step + 1,
                     ah);
      }
    }
  }
  tr.final = p;
  return tr;
}

// ------------------------------------------------------------ distributed
struct RunSpec {
  const char *label;
  dmuon_mode_t mode;
  int replicateAsync;
  bool checks; // I1-I4 and byte counts after every step (synchronizes every step)
};

const char *kKinds[] = {"broadcast", "reduce", "replicate",
                                              "allreduce", "gather", "scatter",
                                              "allgather", "reduce_scatter"};
static_assert(sizeof kKinds / sizeof kKinds[0] == DMUON_COLLECTIVE_COUNT,
              "a name for every collective kind");

class Distributed {
public:
  Distributed(const dmuon::Plan &plan, const Config &cfg, const std::vector<Spec> &specs,
              const Topology &topo, bool differentData)
      : plan_(plan), cfg_(cfg), specs_(specs), topo_(topo), differentData_(differentData) {
    for (const Spec &s : specs_) {
      const int i = plan_.findParam(s.name);
      infos_[s.name] = plan_.param(i);
      if (s.shardDim >= 0 && topo_.mpDim < 0)
        throw std::runtime_error("layout shards " + s.name + " but the mesh has no mp dim");
      localSpec_[s.name] = s;
      if (s.shardDim >= 0) {
        Spec &l = localSpec_[s.name];
        l.shape[static_cast<size_t>(s.shardDim)] /= topo_.mpSize;
        l.numel /= topo_.mpSize;
      }
    }
    for (int i = 0; i < plan_.numParams(); ++i) {
      dmuon_param_info_t p = plan_.param(i);
      if (p.role == DMUON_ROLE_MUON)
        muon_.push_back(p);
    }
  }

  // Plan-level facts: the plan's params are the model's, every Muon param is
  // f32 with an owner slot inside the mesh, owner_rank the slot's rank at
  // model-parallel coordinate 0 (or, for a param its owner spans a data-
  // carrying dim for, the coordinate it names), and several owners own
  // something.
  void checkPlan() {
    if (plan_.numParams() != static_cast<int>(specs_.size()))
      fail("[%s] the plan has %d params, the model %zu", topo_.text.c_str(), plan_.numParams(),
           specs_.size());
    for (const Spec &s : specs_) {
      const dmuon_param_info_t &p = infos_.at(s.name);
      bool same = p.ndim == static_cast<int>(s.shape.size());
      for (int d = 0; same && d < p.ndim; ++d)
        same = p.shape[d] == s.shape[static_cast<size_t>(d)];
      if (!same)
        fail("[%s] %s: the plan's (global) shape differs from the model's", topo_.text.c_str(),
             s.name.c_str());
      if (p.dtype != DMUON_DTYPE_F32)
        fail("[%s] %s: dtype %d, the test binds f32 views", topo_.text.c_str(), s.name.c_str(),
             static_cast<int>(p.dtype));
      const bool wantMuon = s.name.find(".up.") != std::string::npos ||
                            s.name.find(".down.") != std::string::npos ||
                            s.name.find("experts") != std::string::npos;
      if ((p.role == DMUON_ROLE_MUON) != wantMuon)
        fail("[%s] %s: role %s, expected %s", topo_.text.c_str(), s.name.c_str(),
             p.role == DMUON_ROLE_MUON ? "muon" : "adamw", wantMuon ? "muon" : "adamw");
    }
    std::vector<int> slots(static_cast<size_t>(topo_.G * topo_.R * topo_.mpSize), 0);
    for (const dmuon_param_info_t &p : muon_) {
      if (p.owner_shard < 0 || p.owner_shard >= topo_.G || p.owner_replicate < 0 ||
          p.owner_replicate >= topo_.R) {
        fail("[%s] %s: owner slot (%d,%d) outside the mesh", topo_.text.c_str(), p.name,
             p.owner_shard, p.owner_replicate);
        continue;
      }
      if (p.owner_rank < 0 || p.owner_rank >= gWorld) {
        fail("[%s] %s: owner_rank %d outside the world", topo_.text.c_str(), p.name,
             p.owner_rank);
        continue;
      }
      const int m = ownerMp(p);
      if (p.owner_rank != topo_.rankAt(p.owner_shard, p.owner_replicate, m))
        fail("[%s] %s: owner_rank %d is not the rank %d of slot (%d,%d) at %s=%d",
             topo_.text.c_str(), p.name, p.owner_rank,
             topo_.rankAt(p.owner_shard, p.owner_replicate, m), p.owner_shard,
             p.owner_replicate, topo_.mpName.c_str(), m);
      ++slots[static_cast<size_t>((p.owner_replicate * topo_.G + p.owner_shard) * topo_.mpSize +
                                  m)];
      if (p.hook_group < 0)
        fail("[%s] %s: Muon param without a hook group", topo_.text.c_str(), p.name);
    }
    int used = 0;
    for (int n : slots)
      used += n > 0;
    info("[%s] plan: %zu Muon params over %d of %d owners (owner slot x %s coordinate), %d "
         "hook groups",
         topo_.text.c_str(), muon_.size(), used, topo_.G * topo_.R * topo_.mpSize,
         topo_.mpName.c_str(), plan_.numHookGroups());
    if (topo_.G * topo_.R > 1 && used < 2)
      fail("[%s] only %d owner slots used; the test wants several", topo_.text.c_str(), used);
  }

  // A model-parallel param takes and gives its local shard: the global
  // numel is refused (with a status and a message, on every rank alike).
  void checkLocalSizes() {
    const int before = gFailures;
    MPI_Comm comm = MPI_COMM_WORLD;
    dmuon_runtime_options_t opt;
    dmuon_runtime_options_init(&opt);
    opt.backend = DMUON_BACKEND_MPI;
    opt.communicator = &comm;
    dmuon::Runtime rt(plan_, opt);
    int sharded = 0;
    for (const Spec &s : specs_) {
      if (s.shardDim < 0 || topo_.mpSize < 2)
        continue;
      ++sharded;
      const std::vector<float> full = initParam(s);
      dmuon_status_t st = dmuon_runtime_bind_param(rt.get(), s.name.c_str(), full.data(), s.numel);
      if (st != DMUON_ERROR_INVALID_ARGUMENT)
        fail("[%s] bind_param('%s') with the global numel %" PRId64 " returned %s, expected "
             "INVALID_ARGUMENT (the local shard has %" PRId64 ")",
             topo_.text.c_str(), s.name.c_str(), s.numel, dmuon_status_string(st),
             localSpec_.at(s.name).numel);
      else if (std::string(dmuon_runtime_last_error(rt.get())).empty())
        fail("[%s] bind_param('%s') refused without a message", topo_.text.c_str(), s.name.c_str());
    }
    for (const Spec &s : specs_) {
      const std::vector<float> full = initParam(s);
      const std::vector<float> local =
          s.shardDim >= 0 ? sliceOf(full, s.shape, s.shardDim, topo_.mpSize, topo_.mp) : full;
      rt.bindParam(s.name, local.data(), static_cast<int64_t>(local.size()));
      // The C ABI alone tells a host which slice that is.
      dmuon_param_slice_t slice{};
      slice.struct_size = sizeof slice;
      slice.version = DMUON_PARAM_SLICE_VERSION;
      if (dmuon_plan_param_slice(plan_.get(), plan_.findParam(s.name), gRank, &slice) !=
          DMUON_SUCCESS) {
        fail("[%s] param_slice('%s'): %s", topo_.text.c_str(), s.name.c_str(), dmuon_last_error());
        continue;
      }
      const Spec &l = localSpec_.at(s.name);
      for (size_t k = 0; k < s.shape.size(); ++k) {
        const int64_t wantOffset =
            static_cast<int>(k) == s.shardDim ? topo_.mp * l.shape[k] : 0;
        if (slice.shape[k] != l.shape[k] || slice.offset[k] != wantOffset)
          fail("[%s] param_slice('%s') dim %zu: shape %" PRId64 " offset %" PRId64
               ", expected %" PRId64 " at %" PRId64,
               topo_.text.c_str(), s.name.c_str(), k, slice.shape[k], slice.offset[k],
               l.shape[k], wantOffset);
      }
      if (slice.numel != static_cast<int64_t>(local.size()))
        fail("[%s] param_slice('%s') numel %" PRId64 ", bound %zu", topo_.text.c_str(),
             s.name.c_str(), slice.numel, local.size());
    }
    for (const Spec &s : specs_) {
      if (s.shardDim < 0 || topo_.mpSize < 2)
        continue;
      std::vector<float> out(static_cast<size_t>(s.numel));
      dmuon_status_t st = dmuon_runtime_gather_param(rt.get(), s.name.c_str(), out.data(), s.numel);
      if (st != DMUON_ERROR_INVALID_ARGUMENT)
        fail("[%s] gather_param('%s') into the global numel returned %s, expected "
             "INVALID_ARGUMENT",
             topo_.text.c_str(), s.name.c_str(), dmuon_status_string(st));
    }
    if (gFailures == before && sharded > 0)
      info("[%s] %d sharded params: bind_param / gather_param of the global size are refused",
           topo_.text.c_str(), sharded);
  }

  Trajectory run(const RunSpec &spec) {
    MPI_Comm comm = MPI_COMM_WORLD;
    dmuon_runtime_options_t opt;
    dmuon_runtime_options_init(&opt); // hyper-parameters: the plan's
    opt.backend = DMUON_BACKEND_MPI;
    opt.communicator = &comm;
    opt.mode = spec.mode;
    opt.replicate_async = spec.replicateAsync;
    dmuon::Runtime rt(plan_, opt);
    for (const Spec &s : specs_) {
      const std::vector<float> full = initParam(s);
      const std::vector<float> local =
          s.shardDim >= 0 ? sliceOf(full, s.shape, s.shardDim, topo_.mpSize, topo_.mp) : full;
      rt.bindParam(s.name, local.data(), static_cast<int64_t>(local.size()));
    }
    Trajectory tr;
    tr.initial = reassembleAll(rt);

    // Ranks of a data-carrying model-parallel dim (ep, cp) read different
    // rows; the reference trains on their union, the global batch.
    const int spread = differentData_ ? topo_.mpSize : 1;
    const int dpSize = topo_.G * topo_.R * spread;
    const int dpIndex = (topo_.replicate * topo_.G + topo_.shard) * spread +
                        (differentData_ ? topo_.mp : 0);
    const int64_t local = cfg_.globalBatch / dpSize;
    const int64_t first = dpIndex * local;
    std::vector<float> x, t;
    Tensors full, grads;
    for (const Spec &s : specs_)
      grads[s.name].assign(static_cast<size_t>(s.numel), 0.0f);
    const int groups = plan_.numHookGroups();

    for (int step = 0; step < kSteps; ++step) {
      makeBatch(cfg_, step, first, local, x, t);
      if (spec.checks)
        rt.resetCommCounters();
      // Forward: unshard each hook group, reassemble its params over the
      // model-parallel group while the views are valid.
      for (int g = 0; g < groups; ++g) {
        rt.preForward(g);
        for (const dmuon_param_info_t &p : muon_)
          if (p.hook_group == g)
            full[p.name] = reassembleView(rt, p.name);
        rt.postForward(g);
      }
      for (const Spec &s : specs_)
        if (infos_.at(s.name).role != DMUON_ROLE_MUON)
          full[s.name] = reassembleView(rt, s.name);
      for (auto &[name, grad] : grads)
        std::fill(grad.begin(), grad.end(), 0.0f);
      const double mine = forwardBackward(cfg_, full, grads, x.data(), t.data(), local, first);
      // Backward: each rank writes its local slice of every gradient.
      for (int g = groups - 1; g >= 0; --g) {
        rt.preBackward(g);
        for (const dmuon_param_info_t &p : muon_)
          if (p.hook_group == g)
            writeGrad(rt, p.name, grads.at(p.name));
        rt.postBackward(g);
      }
      for (const Spec &s : specs_)
        if (infos_.at(s.name).role != DMUON_ROLE_MUON)
          writeGrad(rt, s.name, grads.at(s.name));
      if (spec.checks) {
        rt.finishBackward();
        checkI3(rt, spec, step);
      }
      rt.step();
      tr.norms.push_back(rt.gradNorm().total);
      if (spec.checks) {
        rt.synchronize();
        checkCounters(rt, spec, step);
        checkI1I2I4(rt, spec, step);
      }
      // Every rank of a model-parallel group computed the same loss.
      double sum = 0;
      MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      tr.losses.push_back(static_cast<float>(sum / gWorld));
    }
    rt.synchronize();
    tr.final = reassembleAll(rt);
    return tr;
  }

private:
  // The full tensor from the local shards of the model-parallel group.
  std::vector<float> assemble(const std::string &name, const float *localData) {
    const Spec &s = localSpec_.at(name);
    if (s.shardDim < 0)
      return std::vector<float>(localData, localData + s.numel);
    std::vector<float> chunks(static_cast<size_t>(s.numel * topo_.mpSize));
    MPI_Allgather(localData, static_cast<int>(s.numel), MPI_FLOAT, chunks.data(),
                  static_cast<int>(s.numel), MPI_FLOAT, topo_.mpComm);
    const Spec &global = specs_[index(name)];
    return concatOf(chunks, global.shape, s.shardDim, topo_.mpSize);
  }

  size_t index(const std::string &name) const {
    for (size_t i = 0; i < specs_.size(); ++i)
      if (specs_[i].name == name)
        return i;
    throw std::runtime_error("unknown param " + name);
  }

  std::vector<float> reassembleView(dmuon::Runtime &rt, const std::string &name) {
    const float *v = static_cast<const float *>(rt.paramView(plan_.findParam(name)));
    return assemble(name, v);
  }

  // gather_param (the global owner's local shard, over the data-parallel
  // group), then the model-parallel group's shards concatenated.
  Tensors reassembleAll(dmuon::Runtime &rt) {
    Tensors out;
    for (const Spec &s : specs_) {
      std::vector<float> v(static_cast<size_t>(localSpec_.at(s.name).numel));
      rt.gatherParam(s.name, v.data(), static_cast<int64_t>(v.size()));
      out[s.name] = assemble(s.name, v.data());
    }
    return out;
  }

  void writeGrad(dmuon::Runtime &rt, const std::string &name, const std::vector<float> &fullGrad) {
    const Spec &global = specs_[index(name)];
    std::vector<float> routed = fullGrad;
    // A param sharded on a data-carrying dim (experts on ep) sees the tokens
    // of every rank along it, as an all-to-all would route them there.
    if (global.shardDim >= 0 && topo_.mpCarriesData)
      MPI_Allreduce(MPI_IN_PLACE, routed.data(), static_cast<int>(routed.size()), MPI_FLOAT,
                    MPI_SUM, topo_.mpComm);
    const std::vector<float> mine =
        global.shardDim >= 0
            ? sliceOf(routed, global.shape, global.shardDim, topo_.mpSize, topo_.mp)
            : routed;
    float *g = rt.gradView(plan_.findParam(name));
    for (size_t i = 0; i < mine.size(); ++i)
      g[i] += mine[i];
  }

  // Whether the param's owner picks a coordinate on the model-parallel dim:
  // it carries data and the param is Replicate on it (docs/dmuonc.md, "Data-
  // carrying dims"); owner_rank then names that coordinate.
  bool ownedAcrossMp(const dmuon_param_info_t &p) const {
    return topo_.mpCarriesData && localSpec_.at(p.name).shardDim < 0;
  }
  int ownerMp(const dmuon_param_info_t &p) const {
    return ownedAcrossMp(p) ? topo_.coordOf(p.owner_rank)[static_cast<size_t>(topo_.mpDim)] : 0;
  }
  // Ranks in one owner's column: dp_replicate, and the model-parallel dim
  // when the owner spans it.
  uint64_t columnSize(const dmuon_param_info_t &p) const {
    return static_cast<uint64_t>(topo_.R) *
           static_cast<uint64_t>(ownedAcrossMp(p) ? topo_.mpSize : 1);
  }
  bool isOwnerHere(const dmuon_param_info_t &p) const {
    return p.owner_shard == topo_.shard && p.owner_replicate == topo_.replicate &&
           (!ownedAcrossMp(p) || ownerMp(p) == topo_.mp);
  }

  std::string where() const {
    char buf[96];
    std::snprintf(buf, sizeof buf, "(shard %d, replicate %d, %s %d)", topo_.shard, topo_.replicate,
                  topo_.mpName.c_str(), topo_.mp);
    return buf;
  }

  void checkI3(dmuon::Runtime &rt, const RunSpec &spec, int step) {
    for (const dmuon_param_info_t &p : muon_) {
      dmuon_param_state_t s = rt.paramState(p.name);
      const bool owner = isOwnerHere(p);
      if ((s.has_reduced_grad != 0) != owner)
        fail("[%s %s] step %d, after finish_backward: I3: %s has_reduced_grad=%d but this rank "
             "%s %s in the owner slot (%d,%d)",
             topo_.text.c_str(), spec.label, step, p.name, s.has_reduced_grad, where().c_str(),
             owner ? "is" : "is not", p.owner_shard, p.owner_replicate);
    }
  }

  void checkI1I2I4(dmuon::Runtime &rt, const RunSpec &spec, int step) {
    std::vector<uint64_t> sums;
    for (const dmuon_param_info_t &p : muon_) {
      dmuon_param_state_t s = rt.paramState(p.name);
      const bool owner = isOwnerHere(p);
      const bool column = p.owner_shard == topo_.shard;
      if ((s.is_owner != 0) != owner)
        fail("[%s %s] step %d: I1: %s is_owner=%d, but this rank %s %s in its owner slot "
             "(%d,%d)",
             topo_.text.c_str(), spec.label, step, p.name, s.is_owner, where().c_str(),
             owner ? "is" : "is not", p.owner_shard, p.owner_replicate);
      if ((s.has_owned_data != 0) != column)
        fail("[%s %s] step %d: I2: %s has_owned_data=%d, but this rank %s %s on the owner's "
             "shard %d",
             topo_.text.c_str(), spec.label, step, p.name, s.has_owned_data, where().c_str(),
             column ? "is" : "is not", p.owner_shard);
      if ((s.has_momentum != 0) != owner)
        fail("[%s %s] step %d: %s has_momentum=%d on a rank %s that %s in the owner slot",
             topo_.text.c_str(), spec.label, step, p.name, s.has_momentum, where().c_str(),
             owner ? "is" : "is not");
      if (column && s.owned_checksum == 0)
        fail("[%s %s] step %d: I4: %s owned_checksum is 0 on a rank holding owned data",
             topo_.text.c_str(), spec.label, step, p.name);
      if (!column && s.owned_checksum != 0)
        fail("[%s %s] step %d: %s owned_checksum=0x%016" PRIx64 " on a rank without owned data",
             topo_.text.c_str(), spec.label, step, p.name, s.owned_checksum);
      sums.push_back(s.owned_checksum);
    }
    // I4 per model-parallel coordinate: down the owner's shard column, every
    // replica at coordinate m holds the global owner at m's checksum.
    const size_t n = sums.size();
    std::vector<uint64_t> all(n * static_cast<size_t>(gWorld));
    MPI_Allgather(sums.data(), static_cast<int>(n), MPI_UINT64_T, all.data(), static_cast<int>(n),
                  MPI_UINT64_T, MPI_COMM_WORLD);
    if (gRank != 0)
      return;
    for (size_t i = 0; i < n; ++i) {
      const dmuon_param_info_t &p = muon_[i];
      for (int m = 0; m < topo_.mpSize; ++m) {
        const int owner = topo_.rankAt(p.owner_shard, p.owner_replicate, m);
        const uint64_t ref = all[static_cast<size_t>(owner) * n + i];
        for (int r = 0; r < topo_.R; ++r) {
          const int peer = topo_.rankAt(p.owner_shard, r, m);
          const uint64_t got = all[static_cast<size_t>(peer) * n + i];
          if (got != ref)
            fail("[%s %s] step %d: I4: %s checksum 0x%016" PRIx64 " on rank %d differs from "
                 "the owner rank %d's 0x%016" PRIx64 " (%s %d)",
                 topo_.text.c_str(), spec.label, step, p.name, got, peer, owner, ref,
                 topo_.mpName.c_str(), m);
        }
      }
    }
  }

  // This rank's bytes per step from the param table and the accounting rule
  // of docs/plan-format.md, independently of the plan's stats: as in
  // mpi_test.cpp with P = the local shard's fp32 bytes (every local shard of
  // this model is a multiple of the 256-byte alignment), within the rank's
  // own model-parallel coordinate. The gather/scatter of a comm param owned
  // by this rank's slot depends on which coordinate runs NS (the plan's
  // compute index, not in the C API), so only its sum is predicted here:
  // per such param a rank either sends P (gather) and receives P (scatter),
  // or receives (K-1)P and sends (K-1)P; `commOwned` counts them.
  dmuon_comm_counters_t predict(dmuon_mode_t mode, uint64_t &commOwnedBytes) const {
    dmuon_comm_counters_t c{};
    const uint64_t G = static_cast<uint64_t>(topo_.G), R = static_cast<uint64_t>(topo_.R);
    const uint64_t passes = mode == DMUON_MODE_Z2 ? 1 : 2;
    commOwnedBytes = 0;
    for (const Spec &s : specs_) {
      const dmuon_param_info_t &p = infos_.at(s.name);
      const uint64_t P = static_cast<uint64_t>(localSpec_.at(s.name).numel) * sizeof(float);
      // A replicated adamw param is summed along a data-carrying dim it is
      // Replicate on by an all-reduce; a Muon param's owner column spans it.
      const bool alongData = topo_.mpCarriesData && topo_.mpSize > 1 && s.shardDim < 0;
      if (p.role != DMUON_ROLE_MUON) {
        const uint64_t n = (G * R > 1 ? 1 : 0) + (alongData ? 1 : 0);
        c.kinds[DMUON_COLLECTIVE_ALLREDUCE].sent += n * P;
        c.kinds[DMUON_COLLECTIVE_ALLREDUCE].received += n * P;
        continue;
      }
      const uint64_t C = columnSize(p);
      const bool column = p.owner_shard == topo_.shard;
      const bool owner = isOwnerHere(p);
      if (column) {
        c.kinds[DMUON_COLLECTIVE_BROADCAST].sent += passes * (G - 1) * P;
        c.kinds[DMUON_COLLECTIVE_REDUCE].received += (G - 1) * P;
      } else {
        c.kinds[DMUON_COLLECTIVE_BROADCAST].received += passes * P;
        c.kinds[DMUON_COLLECTIVE_REDUCE].sent += P;
      }
      if (owner) {
        c.kinds[DMUON_COLLECTIVE_REDUCE].received += (C - 1) * P;
        c.kinds[DMUON_COLLECTIVE_REPLICATE].sent += (C - 1) * P;
      } else if (column) {
        c.kinds[DMUON_COLLECTIVE_REDUCE].sent += P;
        c.kinds[DMUON_COLLECTIVE_REPLICATE].received += P;
      }
      // A comm param: sharded on one of the two matrix dims.
      const bool comm = s.shardDim >= 0 && s.shardDim >= static_cast<int>(s.shape.size()) - 2;
      if (owner && comm && topo_.mpSize > 1)
        commOwnedBytes += P;
    }
    return c;
  }

  void checkCounters(dmuon::Runtime &rt, const RunSpec &spec, int step) {
    const dmuon_comm_counters_t got = rt.commCounters();
    const dmuon_comm_counters_t want = rt.plannedCounters();
    uint64_t commOwned = 0;
    const dmuon_comm_counters_t mine = predict(spec.mode, commOwned);
    const std::string &m = topo_.text;
    if (step == 0) {
      uint64_t total = 0;
      for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k)
        total += want.kinds[k].sent + want.kinds[k].received;
      for (int k = 0; k < DMUON_COLLECTIVE_GATHER; ++k) {
        if (want.kinds[k].sent != mine.kinds[k].sent || want.kinds[k].received != mine.kinds[k].received)
          fail("[%s %s] %s: dmuon_runtime_planned_counters says sent %" PRIu64
               " / received %" PRIu64 ", the param table and the accounting rule give %" PRIu64
               " / %" PRIu64,
               m.c_str(), spec.label, kKinds[k], want.kinds[k].sent, want.kinds[k].received, mine.kinds[k].sent,
               mine.kinds[k].received);
      }
      if (gWorld > 1 && total == 0)
        fail("[%s %s] the plan predicts no communication at all", m.c_str(), spec.label);
      // Gather/scatter: per comm param owned by this slot, P either way.
      const uint64_t K1 = static_cast<uint64_t>(std::max(1, topo_.mpSize - 1));
      const uint64_t gs = want.kinds[DMUON_COLLECTIVE_GATHER].sent,
                     gr = want.kinds[DMUON_COLLECTIVE_GATHER].received,
                     ss = want.kinds[DMUON_COLLECTIVE_SCATTER].sent,
                     sr = want.kinds[DMUON_COLLECTIVE_SCATTER].received;
      if (gs + gr / K1 != commOwned || gr % K1 != 0)
        fail("[%s %s] gather: the plan predicts sent %" PRIu64 " / received %" PRIu64
             ", but this rank's slot owns %" PRIu64 " bytes of comm shards (sent P or received "
             "(K-1)P each)",
             m.c_str(), spec.label, gs, gr, commOwned);
      if (ss != gr || sr != gs)
        fail("[%s %s] scatter sent/received %" PRIu64 "/%" PRIu64
             " do not mirror gather received/sent %" PRIu64 "/%" PRIu64,
             m.c_str(), spec.label, ss, sr, gr, gs);
      if (topo_.mpName == "tp" && topo_.mpSize > 1) {
        // Over the whole world some rank gathers, and gathered bytes balance.
        uint64_t mineG[2] = {gs, gr}, sumG[2] = {0, 0};
        MPI_Allreduce(mineG, sumG, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (sumG[0] == 0 || sumG[0] != sumG[1])
          fail("[%s %s] gather bytes over all ranks: sent %" PRIu64 ", received %" PRIu64,
               m.c_str(), spec.label, sumG[0], sumG[1]);
      }
      if (gRank == 0) {
        std::printf("[%s %s] rank 0 bytes per step (sent/received):", m.c_str(), spec.label);
        for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k)
          std::printf(" %s %" PRIu64 "/%" PRIu64, kKinds[k], got.kinds[k].sent, got.kinds[k].received);
        std::printf("\n");
      }
    }
    for (int k = 0; k < DMUON_COLLECTIVE_COUNT; ++k) {
      if (got.kinds[k].sent != want.kinds[k].sent)
        fail("[%s %s] step %d: %s bytes sent %" PRIu64 ", the plan predicts %" PRIu64, m.c_str(),
             spec.label, step, kKinds[k], got.kinds[k].sent, want.kinds[k].sent);
      if (got.kinds[k].received != want.kinds[k].received)
        fail("[%s %s] step %d: %s bytes received %" PRIu64 ", the plan predicts %" PRIu64,
             m.c_str(), spec.label, step, kKinds[k], got.kinds[k].received, want.kinds[k].received);
    }
  }

  const dmuon::Plan &plan_;
  Config cfg_;
  std::vector<Spec> specs_;
  const Topology &topo_;
  bool differentData_; // ranks along the model-parallel dim read different rows
  std::map<std::string, dmuon_param_info_t> infos_;
  std::map<std::string, Spec> localSpec_;
  std::vector<dmuon_param_info_t> muon_;
};

// ------------------------------------------------------------ comparisons
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

void expectIdentical(const char *what, const Trajectory &a, const Trajectory &b,
                     const std::string &mesh) {
  const int before = gFailures;
  int bad = 0;
  for (size_t i = 0; i < a.losses.size() && i < b.losses.size(); ++i)
    if (bits(a.losses[i]) != bits(b.losses[i]) && bad++ < 3)
      fail("[%s] %s: loss at step %zu differs: %.9g vs %.9g", mesh.c_str(), what, i,
           static_cast<double>(a.losses[i]), static_cast<double>(b.losses[i]));
  for (const auto &[name, va] : a.final) {
    const std::vector<float> &vb = b.final.at(name);
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < va.size(); ++i)
      if (bits(va[i]) != bits(vb[i]) && diff++ == 0)
        first = i;
    if (diff)
      fail("[%s] %s: %s differs in %zu of %zu elements after %d steps (first [%zu]: %.9g vs "
           "%.9g)",
           mesh.c_str(), what, name.c_str(), diff, va.size(), kSteps, first,
           static_cast<double>(va[first]), static_cast<double>(vb[first]));
  }
  if (globalFailures() == 0 && gFailures == before)
    info("[%s] %s: bit-identical losses and params over %d steps", mesh.c_str(), what, kSteps);
}

void compareWithReference(const Trajectory &dist, const Trajectory &ref, const std::string &mesh) {
  for (const auto &[name, v] : ref.initial)
    if (dist.initial.at(name) != v)
      fail("[%s] %s: reassembled right after binding, differs from its initial values",
           mesh.c_str(), name.c_str());
  // Each element of the averaged gradient counted once over owners,
  // replicas and model-parallel shards and copies.
  double worstNorm = 0;
  for (size_t i = 0; i < ref.norms.size(); ++i)
    worstNorm = std::max(worstNorm, std::fabs(dist.norms[i] - ref.norms[i]) / ref.norms[i]);
  if (worstNorm > 1e-6)
    fail("[%s] global gradient norm: worst relative error %.3g vs the single-process norm",
         mesh.c_str(), worstNorm);
  else
    info("[%s] global gradient norm of every step within %.3g of the single-process norm "
         "(step 0: %.9g)",
         mesh.c_str(), worstNorm, dist.norms[0]);
  const double l0 = dist.losses[0], r0 = ref.losses[0];
  const double lossErr = std::fabs(l0 - r0) / std::max(1e-30, std::fabs(r0));
  if (lossErr > 1e-6)
    fail("[%s] loss at step 0: distributed %.9g, reference %.9g (relative error %.3g)",
         mesh.c_str(), l0, r0, lossErr);
  double worst = 0;
  std::string worstName;
  for (const auto &[name, r] : ref.final) {
    const std::vector<float> &d = dist.final.at(name);
    double maxDiff = 0, maxAbs = 0, moved = 0;
    const std::vector<float> &init = ref.initial.at(name);
    for (size_t i = 0; i < r.size(); ++i) {
      maxDiff = std::max(maxDiff, std::fabs(static_cast<double>(d[i]) - r[i]));
      maxAbs = std::max(maxAbs, std::fabs(static_cast<double>(r[i])));
      moved = std::max(moved, std::fabs(static_cast<double>(r[i]) - init[i]));
    }
    const double rel = maxDiff / std::max(maxAbs, 1e-30);
    if (rel > worst) {
      worst = rel;
      worstName = name;
    }
    if (rel > kRelTol)
      fail("[%s] %s after %d steps: relative error %.3g vs the single-process reference "
           "(max abs diff %.3g, max abs value %.3g; tolerance %g)",
           mesh.c_str(), name.c_str(), kSteps, rel, maxDiff, maxAbs, kRelTol);
    if (moved == 0)
      fail("[%s] %s: the reference never moved it (the test would prove nothing)", mesh.c_str(),
           name.c_str());
  }
  // The worst over all ranks (each reassembled on its own).
  struct {
    double v;
    int rank;
  } in{worst, gRank}, out{0, 0};
  MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
  info("[%s] vs single-process reference: loss step 0 %.6f (ref %.6f), step %d %.6f (ref %.6f); "
       "worst param relative error %.3g (rank %d; rank 0's worst: %s)",
       mesh.c_str(), l0, r0, kSteps - 1, static_cast<double>(dist.losses.back()),
       static_cast<double>(ref.losses.back()), out.v, out.rank, worstName.c_str());
}

int usage() {
  if (gRank == 0)
    std::fprintf(stderr, "usage: dmuon-mp-test --plan PLAN --layout tp|ep|cp "
                         "[--different-data-expect-mismatch]\n");
  return 2;
}

int runTests(int argc, char **argv) {
  std::string planPath, layout;
  // Different rows along a dim the plan treats as pure model-parallel: the
  // averaged gradient misses the other coordinates' tokens (the run must
  // then differ from the union reference).
  bool expectMismatch = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--plan" && i + 1 < argc)
      planPath = argv[++i];
    else if (a == "--layout" && i + 1 < argc)
      layout = argv[++i];
    else if (a == "--different-data-expect-mismatch")
      expectMismatch = true;
    else
      return usage();
  }
  if (planPath.empty() || (layout != "tp" && layout != "ep" && layout != "cp"))
    return usage();
  dmuon::Plan plan(planPath);
  if (plan.worldSize() != gWorld) {
    if (gRank == 0)
      std::fprintf(stderr, "dmuon-mp-test: the plan is for %d ranks, running on %d\n",
                   plan.worldSize(), gWorld);
    return 2;
  }
  const Config cfg;
  const std::vector<Spec> specs = modelSpecs(cfg, layout);
  const Topology topo = makeTopology(plan);
  if (layout == "tp" && topo.mpName != "tp")
    throw std::runtime_error("layout tp on a mesh without a tp dim");
  if (cfg.globalBatch % (topo.G * topo.R) != 0)
    throw std::runtime_error("the global batch does not split over the data-parallel ranks");

  Distributed dist(plan, cfg, specs, topo, topo.mpCarriesData || expectMismatch);
  dist.checkPlan();
  dist.checkLocalSizes();
  const Trajectory ref = runReference(plan, cfg, specs);
  if (expectMismatch) {
    if (topo.mpCarriesData)
      throw std::runtime_error("--different-data-expect-mismatch wants a plan whose '" +
                               topo.mpName + "' is pure model-parallel (':model')");
    const Trajectory a = dist.run({"z3/async", DMUON_MODE_Z3, 1, false});
    double worst = 0;
    for (const auto &[name, r] : ref.final) {
      double diff = 0, scale = 0;
      for (size_t i = 0; i < r.size(); ++i) {
        diff = std::max(diff, std::fabs(static_cast<double>(a.final.at(name)[i]) - r[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(r[i])));
      }
      worst = std::max(worst, diff / std::max(scale, 1e-30));
    }
    if (worst < 1e-3)
      fail("[%s] different rows per '%s' coordinate with '%s' pure model-parallel: params "
           "within %.3g of the union reference; expected them to miss the other "
           "coordinates' tokens",
           topo.text.c_str(), topo.mpName.c_str(), topo.mpName.c_str(), worst);
    else
      info("[%s] '%s' as pure model-parallel with different rows per coordinate: worst param "
           "relative error %.3g vs the union reference (the data-carrying default gives "
           "agreement within 1e-4)",
           topo.text.c_str(), topo.mpName.c_str(), worst);
    MPI_Comm comm = topo.mpComm;
    MPI_Comm_free(&comm);
    return 0;
  }

  const RunSpec z3async{"z3/async", DMUON_MODE_Z3, 1, true};
  const RunSpec z2sync{"z2/sync", DMUON_MODE_Z2, 0, true};
  const RunSpec overlap{"z3/async, no synchronize between steps", DMUON_MODE_Z3, 1, false};

  const Trajectory a = dist.run(z3async);
  info("[%s] %s: %d steps, I1-I4 and byte counts checked after every step (%d failures so far)",
       topo.text.c_str(), z3async.label, kSteps, globalFailures());
  compareWithReference(a, ref, topo.text);
  for (const RunSpec *spec : {&z2sync, &overlap}) {
    const Trajectory b = dist.run(*spec);
    const std::string what = std::string(spec->label) + " vs " + z3async.label;
    expectIdentical(what.c_str(), b, a, topo.text);
  }
  MPI_Comm comm = topo.mpComm;
  MPI_Comm_free(&comm);
  return 0;
}

} // namespace

int main(int argc, char **argv) { return mpicheck::runMain(argc, argv, runTests); }
