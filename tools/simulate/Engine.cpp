// The lifecycle follows runtime/core/Executor.cpp and runtime/routes/
// OwnerRoute.cpp call by call; where the runtime waits (NCCL: the compute
// stream waits on the collective's event; MPI: the host blocks), the
// compute stream's clock moves to the collective's end.
#include "Engine.h"
#include "CostModel.h"

#include <algorithm>
#include <array>
#include <deque>

namespace dmuon::sim {

namespace {

class Runner {
public:
  Runner(const Cluster &c, const Program &p, const Bounds *b, bool keep)
      : c_(c), p_(p), bounds_(b), keep_(keep) {
    const size_t n = p.groups.size();
    unshardEnd_.assign(n, -1);
    phase1End_.assign(n, 0);
    phase2End_.assign(n, 0);
    replicateEnd_.assign(n, 0);
  }

  RankRun run() {
    double start = 0;
    for (step_ = 0; step_ < kSimulatedSteps; ++step_) {
      start = t_;
      exposed_ = 0;
      forward();
      backward();
      const double stepStart = t_;
      optimizerStep();
      if (step_ == kSimulatedSteps - 1) {
        out_.times.total = t_ - start;
        out_.times.optimizer = t_ - stepStart;
        for (const GroupWork &g : p_.groups)
          out_.times.compute += g.forward + g.backward;
        out_.times.exposed = exposed_;
        out_.times.ns = p_.nsSeconds;
      }
    }
    // The measured step's timeline, from its start: what the last step left
    // running (async replicate broadcasts) shows from 0.
    std::vector<Span> kept;
    for (Span &s : out_.timeline)
      if (s.end > start)
        kept.push_back({std::move(s.what), s.lane, std::max(0.0, s.begin - start), s.end - start});
    out_.timeline = std::move(kept);
    return std::move(out_);
  }

private:
  void span(const std::string &what, int lane, double b, double e) {
    if (keep_ && e > b)
      out_.timeline.push_back({what, lane, b, e});
  }
  void compute(const std::string &what, double seconds) {
    span(what, 0, t_, t_ + seconds);
    t_ += seconds;
  }
  // The compute stream waits for `end`; inside the hooks that is exposed
  // communication.
  void waitFor(double end, bool inHooks) {
    if (end > t_) {
      if (inHooks)
        exposed_ += end - t_;
      t_ = end;
    }
  }
  // Issues `op` now (after the compute stream's work so far), no earlier
  // than `earliest`; returns its end.
  double issue(const CommOp &op, const std::string &what, double earliest = 0) {
    if (op.empty())
      return t_;
    const int s = static_cast<int>(op.stream);
    double &link = linkFree_[op.inter() ? 1 : 0];
    const double begin = std::max({t_, earliest, streamFree_[s], link});
    const double end = begin + opSeconds(c_, op);
    streamFree_[s] = end;
    link = end;
    span(what, 1 + s, begin, end);
    return end;
  }

  void unshard(size_t g) {
    const GroupWork &gw = p_.groups[g];
    // OwnerRoute::unshard packs owned data, which the last step's replicate
    // broadcast may still be writing.
    waitFor(replicateEnd_[g], true);
    unshardEnd_[g] = issue(gw.unshard, gw.name);
  }

  void forward() {
    const size_t n = p_.groups.size();
    for (size_t g = 0; g < n; ++g) {
      if (unshardEnd_[g] < 0)
        unshard(g);
      if (g + 1 < n && unshardEnd_[g + 1] < 0) // prefetch
        unshard(g + 1);
      waitFor(unshardEnd_[g], true);
      compute("forward " + p_.groups[g].name, p_.groups[g].forward);
      if (p_.z3)
        unshardEnd_[g] = -1;
    }
  }

  void backward() {
    const size_t n = p_.groups.size();
    std::deque<size_t> phase2Queue, retireQueue;
    std::vector<double> pending; // DDP: every gradient collective, waited at the end
    for (size_t g = n; g-- > 0;) {
      const GroupWork &gw = p_.groups[g];
      if (unshardEnd_[g] < 0) // Z3 re-broadcasts; Z2 kept the buffer
        unshard(g);
      waitFor(unshardEnd_[g], true);
      compute("backward " + gw.name, gw.backward);
      phase1End_[g] = issue(gw.phase1, gw.name);
      unshardEnd_[g] = -1; // resharded after its reduce is issued
      if (!p_.pipelinedReduce) {
        pending.push_back(phase1End_[g]);
        continue;
      }
      // OwnerRoute::endBackward: retire the group two before, then issue
      // the previous group's phase 2 once its phase 1 is done.
      for (size_t q : retireQueue)
        waitFor(phase2End_[q], true);
      retireQueue.clear();
      for (size_t q : phase2Queue) {
        waitFor(phase1End_[q], true);
        phase2End_[q] = issue(p_.groups[q].phase2, p_.groups[q].name + " phase 2");
        retireQueue.push_back(q);
      }
      phase2Queue.assign(1, g);
    }
    // finish_backward, called by step(): counted in the optimizer step, as
    // the step-time bench does.
    finishQueue_ = {phase2Queue.begin(), phase2Queue.end()};
    retireQueue_ = {retireQueue.begin(), retireQueue.end()};
    pending_ = std::move(pending);
  }

  void optimizerStep() {
    for (size_t q : retireQueue_)
      waitFor(phase2End_[q], false);
    for (size_t q : finishQueue_) {
      waitFor(phase1End_[q], false);
      phase2End_[q] = issue(p_.groups[q].phase2, p_.groups[q].name + " phase 2");
      waitFor(phase2End_[q], false);
    }
    for (double e : pending_)
      waitFor(e, false);
    size_t globalIndex = 0;
    if (out_.arrivals.global.size() <= static_cast<size_t>(step_)) {
      out_.arrivals.global.resize(step_ + 1);
      out_.arrivals.replicate.resize(step_ + 1);
    }
    for (const StepItem &item : p_.step) {
      switch (item.kind) {
      case StepItem::Kind::Compute:
        compute(item.label, item.seconds);
        break;
      case StepItem::Kind::Comm: {
        double earliest = 0;
        if (item.global) {
          out_.arrivals.global[step_].push_back(t_);
          earliest = bound(bounds_ ? &bounds_->global : nullptr, globalIndex++);
        }
        waitFor(issue(item.comm, item.label, earliest), false);
        break;
      }
      case StepItem::Kind::Replicate:
        replicate();
        break;
      }
    }
  }

  // OwnerRoute::broadcastReplicas: every group's, in order; sync mode waits
  // for each.
  void replicate() {
    for (size_t g = 0; g < p_.groups.size(); ++g) {
      const GroupWork &gw = p_.groups[g];
      out_.arrivals.replicate[step_].push_back(t_);
      const double earliest = bound(bounds_ ? &bounds_->replicate : nullptr, g);
      replicateEnd_[g] = issue(gw.replicate, gw.name, earliest);
      if (!p_.replicateAsync)
        waitFor(replicateEnd_[g], false);
    }
  }

  double bound(const std::vector<std::vector<double>> *b, size_t i) const {
    if (!b || b->size() <= static_cast<size_t>(step_) || (*b)[step_].size() <= i)
      return 0;
    return (*b)[step_][i];
  }

  const Cluster &c_;
  const Program &p_;
  const Bounds *bounds_;
  bool keep_;
  RankRun out_;
  int step_ = 0;
  double t_ = 0, exposed_ = 0;
  std::array<double, kNumStreams> streamFree_{};
  std::array<double, 2> linkFree_{};
  std::vector<double> unshardEnd_, phase1End_, phase2End_, replicateEnd_;
  std::vector<size_t> finishQueue_, retireQueue_;
  std::vector<double> pending_;
};

} // namespace

RankRun runProgram(const Cluster &c, const Program &p, const Bounds *bounds,
                   bool keepTimeline) {
  return Runner(c, p, bounds, keepTimeline).run();
}

} // namespace dmuon::sim
