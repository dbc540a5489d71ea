// Reading a plan: verify-before-read. One include for libdmuon and the tools;
// links no LLVM and no protobuf. The library is split by job:
//   ReadFile.h     read a plan file whole
//   Fingerprint.h  FNV-1a 64 and the plan fingerprint
//   PlanVerifier.h the FlatBuffers verifier plus the semantic checks
#ifndef DMUON_PLAN_PLANFILE_H
#define DMUON_PLAN_PLANFILE_H

#include "dmuon/plan_generated.h"
#include "plan/Fingerprint.h"
#include "plan/verify/PlanVerifier.h"
#include "plan/ReadFile.h"

#endif
