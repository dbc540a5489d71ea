// The lifecycle follows runtime/exec/Executor.cpp and runtime/routes/
// OwnerRoute.cpp call by call; where the runtime waits (NCCL: the compute
// stream waits on the collective's event; MPI: the host blocks), the
// compute stream's clock moves to the collective's end. On oversubscribed
// processors the first wait on each collective also costs the program's
// collectiveWait: the rank's peers must be scheduled before it can finish
// (docs/cluster-format.md, "Oversubscribed processors").
#include "sim/Engine.h"
#include "sim/CostModel.h"

#include <algorithm>
#include <array>
#include <deque>

namespace dmuon::sim {

namespace {

// An issued collective: when it ends, and whether a wait on it has not yet
// been charged the oversubscription wait (the runtime waits once on each;
// a later wait on a finished request returns at once).
struct Coll {
  double end = 0;
  bool unwaited = false;
};

class Runner {
public:
  Runner(const Cluster &c, const Program &p, const Bounds *b, bool keep)
      : c_(c), p_(p), bounds_(b), keep_(keep) {
    const size_t n = p.groups.size();
    unshard_.assign(n, {});
    unsharded_.assign(n, false);
    phase1_.assign(n, {});
    phase2_.assign(n, {});
    replicate_.assign(n, {});
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
  // The compute stream waits for the collective `c`; the first wait on it
  // also pays the oversubscription wait.
  void waitFor(Coll &c, bool inHooks) {
    waitFor(c.end, inHooks);
    if (c.unwaited) {
      c.unwaited = false;
      if (inHooks)
        exposed_ += p_.collectiveWait;
      t_ += p_.collectiveWait;
    }
  }
  // Issues `op` now (after the compute stream's work so far), no earlier
  // than `earliest`.
  Coll issue(const CommOp &op, const std::string &what, double earliest = 0) {
    if (op.empty())
      return {t_, false};
    const int s = static_cast<int>(op.stream);
    double &link = linkFree_[op.inter() ? 1 : 0];
    const double begin = std::max({t_, earliest, streamFree_[s], link});
    const double end = begin + opSeconds(c_, op);
    streamFree_[s] = end;
    link = end;
    span(what, 1 + s, begin, end);
    return {end, p_.collectiveWait > 0};
  }

  void unshard(size_t g) {
    const GroupWork &gw = p_.groups[g];
    // OwnerRoute::unshard packs owned data, which the last step's replicate
    // broadcast may still be writing.
    waitFor(replicate_[g], true);
    unshard_[g] = issue(gw.unshard, gw.name);
    unsharded_[g] = true;
  }

  void forward() {
    const size_t n = p_.groups.size();
    for (size_t g = 0; g < n; ++g) {
      if (!unsharded_[g])
        unshard(g);
      if (g + 1 < n && !unsharded_[g + 1]) // prefetch
        unshard(g + 1);
      waitFor(unshard_[g], true);
      compute("forward " + p_.groups[g].name, p_.groups[g].forward);
      if (p_.z3)
        unsharded_[g] = false;
    }
  }

  void backward() {
    const size_t n = p_.groups.size();
    std::deque<size_t> phase2Queue, retireQueue;
    std::vector<Coll> pending; // DDP: every gradient collective, waited at the end
    for (size_t g = n; g-- > 0;) {
      const GroupWork &gw = p_.groups[g];
      if (!unsharded_[g]) // Z3 re-broadcasts; Z2 kept the buffer
        unshard(g);
      waitFor(unshard_[g], true);
      compute("backward " + gw.name, gw.backward);
      phase1_[g] = issue(gw.phase1, gw.name);
      unsharded_[g] = false; // resharded after its reduce is issued
      if (!p_.pipelinedReduce) {
        pending.push_back(phase1_[g]);
        continue;
      }
      // OwnerRoute::endBackward: retire the group two before, then issue
      // the previous group's phase 2 once its phase 1 is done.
      for (size_t q : retireQueue)
        waitFor(phase2_[q], true);
      retireQueue.clear();
      for (size_t q : phase2Queue) {
        waitFor(phase1_[q], true);
        phase2_[q] = issue(p_.groups[q].phase2, p_.groups[q].name + " phase 2");
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
      waitFor(phase2_[q], false);
    for (size_t q : finishQueue_) {
      waitFor(phase1_[q], false);
      phase2_[q] = issue(p_.groups[q].phase2, p_.groups[q].name + " phase 2");
      waitFor(phase2_[q], false);
    }
    for (Coll &c : pending_)
      waitFor(c, false);
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
        Coll c = issue(item.comm, item.label, earliest);
        waitFor(c, false);
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
      replicate_[g] = issue(gw.replicate, gw.name, earliest);
      if (!p_.replicateAsync)
        waitFor(replicate_[g], false);
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
  std::vector<Coll> unshard_, phase1_, phase2_, replicate_;
  std::vector<bool> unsharded_; // the group's unshard issued (and not resharded)
  std::vector<size_t> finishQueue_, retireQueue_;
  std::vector<Coll> pending_;
};

} // namespace

RankRun runProgram(const Cluster &c, const Program &p, const Bounds *bounds,
                   bool keepTimeline) {
  return Runner(c, p, bounds, keepTimeline).run();
}

} // namespace dmuon::sim
