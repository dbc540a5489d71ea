// The host's side of model parallelism in the model-parallel MPI tests
// (mp_test.cpp, mp_checkpoint_test.cpp), on the model of MpModel.h.
#ifndef DMUON_TEST_DISTRIBUTED_MPHOST_H
#define DMUON_TEST_DISTRIBUTED_MPHOST_H

#include "MpModel.h"

namespace mpmodel {

// The host's side of model parallelism, simulated: the runtime holds each
// rank's local shards; a rank reassembles full params over its
// model-parallel group for forward, trains on its data-parallel rows, and
// writes its local slice of each gradient.
class MpHost {
public:
  MpHost(const dmuon::Plan &plan, const Config &cfg, const std::vector<Spec> &specs,
         const Topology &topo, bool differentData)
      : plan_(plan), cfg_(cfg), specs_(specs), topo_(topo), differentData_(differentData) {
    for (const Spec &s : specs_) {
      infos_[s.name] = plan_.param(plan_.findParam(s.name));
      if (s.shardDim >= 0 && topo_.mpDim < 0)
        throw std::runtime_error("layout shards " + s.name + " but the mesh has no mp dim");
      Spec &l = localSpec_[s.name] = s;
      int64_t &largest = largestNumel_[s.name] = s.numel;
      if (s.shardDim >= 0) {
        const int64_t n = s.shape[static_cast<size_t>(s.shardDim)];
        l.shape[static_cast<size_t>(s.shardDim)] =
            rowsOf(s.shape, s.shardDim, topo_.mpSize, s.splitFactor, topo_.mp);
        l.numel = s.numel / n * l.shape[static_cast<size_t>(s.shardDim)];
        largest = s.numel / n * rowsOf(s.shape, s.shardDim, topo_.mpSize, s.splitFactor, 0);
      }
    }
    for (int i = 0; i < plan_.numParams(); ++i) {
      dmuon_param_info_t p = plan_.param(i);
      if (p.role == DMUON_ROLE_MUON)
        muon_.push_back(p);
    }
  }

  const Spec &local(const std::string &name) const { return localSpec_.at(name); }
  // The elements of the largest local slice (coordinate 0's), which every
  // rank's buffers and collectives hold.
  int64_t largestNumel(const std::string &name) const { return largestNumel_.at(name); }
  const dmuon_param_info_t &info(const std::string &name) const { return infos_.at(name); }
  const std::vector<dmuon_param_info_t> &muon() const { return muon_; }

  // This rank's slice of a param's initial values.
  std::vector<float> localInit(const Spec &s) const {
    const std::vector<float> full = initParam(s);
    return s.shardDim >= 0
               ? sliceOf(full, s.shape, s.shardDim, topo_.mpSize, topo_.mp, s.splitFactor)
               : full;
  }

  void bindInitial(dmuon::Runtime &rt) const {
    for (const Spec &s : specs_) {
      const std::vector<float> local = localInit(s);
      rt.bindParam(s.name, local.data(), static_cast<int64_t>(local.size()));
    }
  }

  // One training step on this rank's rows; `beforeStep` (if any) runs
  // between backward and dmuon_runtime_step. Returns the global mean loss.
  float trainStep(dmuon::Runtime &rt, int step, const std::function<void()> &beforeStep = {}) {
    // Ranks of a data-carrying model-parallel dim (ep, cp) read different
    // rows; the reference trains on their union, the global batch.
    const int spread = differentData_ ? topo_.mpSize : 1;
    const int dpSize = topo_.G * topo_.R * spread;
    const int dpIndex =
        (topo_.replicate * topo_.G + topo_.shard) * spread + (differentData_ ? topo_.mp : 0);
    const int64_t local = cfg_.globalBatch / dpSize;
    const int64_t first = dpIndex * local;
    std::vector<float> x, t;
    Tensors full, grads;
    for (const Spec &s : specs_)
      grads[s.name].assign(static_cast<size_t>(s.numel), 0.0f);
    const int groups = plan_.numHookGroups();
    makeBatch(cfg_, step, first, local, x, t);
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
    if (beforeStep)
      beforeStep();
    rt.step();
    // Every rank of a model-parallel group computed the same loss.
    double sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return static_cast<float>(sum / mpicheck::gWorld);
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

private:
  // The full tensor from the local shards of the model-parallel group.
  std::vector<float> assemble(const std::string &name, const float *localData) {
    const Spec &s = localSpec_.at(name);
    if (s.shardDim < 0)
      return std::vector<float>(localData, localData + s.numel);
    // Padded to the largest slice, so the pieces are of one size.
    const int64_t stride = largestNumel_.at(name);
    std::vector<float> mine(localData, localData + s.numel);
    mine.resize(static_cast<size_t>(stride), 0.0f);
    std::vector<float> chunks(static_cast<size_t>(stride * topo_.mpSize));
    MPI_Allgather(mine.data(), static_cast<int>(stride), MPI_FLOAT, chunks.data(),
                  static_cast<int>(stride), MPI_FLOAT, topo_.mpComm);
    return concatOf(chunks, stride, global(name).shape, s.shardDim, topo_.mpSize,
                    s.splitFactor);
  }

  const Spec &global(const std::string &name) const {
    for (const Spec &s : specs_)
      if (s.name == name)
        return s;
    throw std::runtime_error("unknown param " + name);
  }

  std::vector<float> reassembleView(dmuon::Runtime &rt, const std::string &name) {
    const float *v = static_cast<const float *>(rt.paramView(plan_.findParam(name)));
    return assemble(name, v);
  }

  void writeGrad(dmuon::Runtime &rt, const std::string &name, const std::vector<float> &fullGrad) {
    const Spec &g = global(name);
    std::vector<float> routed = fullGrad;
    // A param sharded on a data-carrying dim (experts on ep) sees the tokens
    // of every rank along it, as an all-to-all would route them there.
    if (g.shardDim >= 0 && topo_.mpCarriesData)
      MPI_Allreduce(MPI_IN_PLACE, routed.data(), static_cast<int>(routed.size()), MPI_FLOAT,
                    MPI_SUM, topo_.mpComm);
    const std::vector<float> mine =
        g.shardDim >= 0
            ? sliceOf(routed, g.shape, g.shardDim, topo_.mpSize, topo_.mp, g.splitFactor)
            : routed;
    float *grad = rt.gradView(plan_.findParam(name));
    for (size_t i = 0; i < mine.size(); ++i)
      grad[i] += mine[i];
  }

  const dmuon::Plan &plan_;
  Config cfg_;
  std::vector<Spec> specs_;
  const Topology &topo_;
  bool differentData_; // ranks along the model-parallel dim read different rows
  std::map<std::string, dmuon_param_info_t> infos_;
  std::map<std::string, Spec> localSpec_;
  std::map<std::string, int64_t> largestNumel_;
  std::vector<dmuon_param_info_t> muon_;
};

} // namespace mpmodel

#endif
