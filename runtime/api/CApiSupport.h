// What the C ABI's files share (CApiPlan.cpp: status strings, version,
// plans; CApi.cpp: runtimes; CApiNccl.cpp: NCCL communicators): the handles'
// structs, errors as statuses and messages (nothing throws across the
// boundary), and the argument checks.
#ifndef DMUON_RUNTIME_API_CAPISUPPORT_H
#define DMUON_RUNTIME_API_CAPISUPPORT_H

#include "dmuon/dmuon.h"
#include "common/ParamNames.h"

#include "exec/Executor.h"
#include "core/LoadedPlan.h"

#include <cstring>
#include <memory>
#include <new>
#include <string>

using dmuon::rt::Executor;
using dmuon::rt::LoadedPlan;
using dmuon::rt::Status;

// A plan is shared by its handle and every runtime made from it: the host
// may destroy its handle first.
struct dmuon_plan {
  std::shared_ptr<const LoadedPlan> plan;
};

struct dmuon_runtime {
  std::shared_ptr<const LoadedPlan> plan; // outlives the executor (declared first)
  std::unique_ptr<Executor> executor;
  std::string lastError;
};

namespace dmuon::capi {

// The calling thread's last error (dmuon_last_error).
inline thread_local std::string tlsLastError;

inline dmuon_status_t report(dmuon_runtime *rt, const Status &s) {
  if (!s.isOk() && s.code() != DMUON_STEP_SKIPPED) { // a skipped step is no error
    tlsLastError = s.message();
    if (rt)
      rt->lastError = s.message();
  }
  return s.code();
}

template <typename F> dmuon_status_t guarded(dmuon_runtime *rt, F &&body) {
  try {
    return report(rt, body());
  } catch (const std::bad_alloc &) {
    return report(rt, Status(DMUON_ERROR_OUT_OF_MEMORY, "out of host memory"));
  } catch (const std::exception &e) {
    return report(rt, Status(DMUON_ERROR_INTERNAL, std::string("internal error: ") + e.what()));
  }
}

inline Status requireRuntime(dmuon_runtime *rt) {
  if (!rt || !rt->executor)
    return dmuon::rt::invalidArgument("runtime handle is null");
  return Status::ok();
}

// A name longer than any the plan allows cannot match one; say so without
// reading past the limit.
inline Status requireName(const char *name) {
  if (!name)
    return dmuon::rt::invalidArgument("param name is null");
  const size_t n = ::strnlen(name, dmuon::common::kMaxParamNameBytes + 1);
  if (n > dmuon::common::kMaxParamNameBytes)
    return dmuon::rt::invalidArgument("param name '" +
                                      dmuon::common::printableName(std::string_view(name, n)) +
                                      "' is longer than " +
                                      std::to_string(dmuon::common::kMaxParamNameBytes) +
                                      " bytes; " + dmuon::common::paramNameRuleText());
  return Status::ok();
}

// Output and input structs carry their size and version like the options.
// A struct's later versions only append fields: `sizeOfVersion` gives the
// smallest struct_size a caller built against each version may pass (null:
// the struct has had one layout, sizeof(T)), and `init` the initializer the
// refusal names (null: it says to set the fields by hand).
template <typename T>
Status checkStruct(const T *s, uint32_t newest, const char *what,
                   size_t (*sizeOfVersion)(uint32_t) = nullptr, const char *init = nullptr) {
  if (!s)
    return dmuon::rt::invalidArgument(std::string(what) + " is null");
  if (s->version < 1 || s->version > newest ||
      s->struct_size < (sizeOfVersion ? sizeOfVersion(s->version) : sizeof(T)))
    return dmuon::rt::invalidArgument(std::string(what) + " has struct_size " +
                                      std::to_string(s->struct_size) + " and version " +
                                      std::to_string(s->version) + "; " +
                                      (init ? "initialize it with " + std::string(init) +
                                                  " (version " + std::to_string(newest) + ")"
                                            : "set them to sizeof and " + std::to_string(newest)));
  return Status::ok();
}

// Writes `value` to a checked output struct, keeping the caller's header.
template <typename T> void fillOut(T *out, T value) {
  value.struct_size = out->struct_size;
  value.version = out->version;
  *out = value;
}

inline Status checkParamIndex(const LoadedPlan &plan, int index) {
  if (index < 0 || index >= plan.numParams())
    return dmuon::rt::invalidArgument("param index " + std::to_string(index) +
                                      " is out of range (the plan has " +
                                      std::to_string(plan.numParams()) + ")");
  return Status::ok();
}

// Two of the executor's counters, `get(executor, a, b)`; either output may be null.
template <typename Get>
dmuon_status_t twoCounts(dmuon_runtime *rt, int64_t *outA, int64_t *outB, Get get) {
  return guarded(rt, [&]() -> Status {
    DMUON_RETURN_IF_ERROR(requireRuntime(rt));
    int64_t a = 0, b = 0;
    get(*rt->executor, a, b);
    if (outA)
      *outA = a;
    if (outB)
      *outB = b;
    return Status::ok();
  });
}


} // namespace dmuon::capi

#endif
