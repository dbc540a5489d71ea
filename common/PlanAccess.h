// Null-safe reads of a plan's optional FlatBuffers fields, for the verifier
// and the printers: an absent string reads as "", an absent vector as empty.
//
// common/ is the one place for definitions that the compiler (dmuonc), the
// runtime (libdmuon) and the tools share. Its headers are header-only and
// need nothing but the C++ standard library and the FlatBuffers-generated
// plan header: no LLVM, no protobuf.
#ifndef DMUON_COMMON_PLANACCESS_H
#define DMUON_COMMON_PLANACCESS_H

#include "dmuon/plan_generated.h"

#include <cstdint>
#include <string>

namespace dmuon::common {

inline std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

template <typename T> uint32_t size(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}

} // namespace dmuon::common

#endif
