// The two ways dmuon-gpt updates the model, behind one interface so that the
// training loop (gpt_train.cpp) is the same code for both:
//  - dmuon: libdmuon over MPI, params and gradients in the runtime's buffers
//    (dmuon::torch's DmuonTorch.h), Muon on each matrix's owner rank, AdamW (replicated)
//    for the rest;
//  - reference: one process, libtorch only: ReferenceMuon for the same
//    matrices and torch::optim::AdamW for the rest.
// Which params are Muon comes from the plan in both cases (dmuonc's select).
#ifndef DMUON_EXAMPLES_GPT_GPTBACKENDS_H
#define DMUON_EXAMPLES_GPT_GPTBACKENDS_H

#include "GptFlags.h"
#include "GptModel.h"

#include "dmuon/dmuon.hpp"

#include <mpi.h>

#include <memory>

namespace gpt {

// Hyper-parameters that may change from step to step. Learning-rate
// schedules (and, once the runtime has them, clipping and accumulation)
// belong here: the loop asks for them once per step and hands them to the
// backend's beginStep.
struct StepSettings {
  double lr = 0;      // Muon
  double adamwLr = 0; // AdamW
  // The schedule's factor on the rates the flags leave to the plan (SOAP's
  // and Shampoo's lr): 1 once warmed up.
  double scale = 1;
};

class TrainBackend {
public:
  virtual ~TrainBackend() = default;
  virtual void beginStep(const StepSettings &settings) = 0;
  // Hooks the model's forward calls around each block (null: none).
  virtual BlockHooks *hooks() = 0;
  // After loss.backward(), before step().
  virtual void endBackward() = 0;
  virtual void step() = 0;
  // A model holding the current params on this rank, for evaluation
  // (dmuon: a replica filled by a collective gather; every rank calls it).
  virtual Gpt evalModel() = 0;
};

std::unique_ptr<TrainBackend> makeDmuonBackend(const GptFlags &flags, Gpt model,
                                               const dmuon::Plan &plan, MPI_Comm comm);
std::unique_ptr<TrainBackend> makeReferenceBackend(const GptFlags &flags, Gpt model,
                                                   const dmuon::Plan &plan);

} // namespace gpt

#endif
