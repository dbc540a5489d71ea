// FNV-1a 64 and the plan fingerprint (Fingerprint.h).
#include "plan/Fingerprint.h"

#include "dmuon/plan_generated.h"

namespace dmuon::planfile {

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;

uint64_t fnv1a64From(uint64_t h, const uint8_t *data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

} // namespace

uint64_t fnv1a64(const uint8_t *data, size_t size) { return fnv1a64From(kFnvOffset, data, size); }

bool computeFingerprint(const uint8_t *data, size_t size, uint64_t &out) {
  if (size < 8)
    return false;
  // SetField on an absent field "succeeds" when the value is the default, so
  // presence is checked on the table itself.
  const auto *table = flatbuffers::GetRoot<flatbuffers::Table>(data);
  const flatbuffers::voffset_t field = table->GetOptionalFieldOffset(plan::Plan::VT_FINGERPRINT);
  if (!field)
    return false;
  // The hash of the buffer with the field's 8 bytes at zero, streamed around
  // the field instead of hashing a copy (plans run to tens of megabytes).
  const uint8_t *at = reinterpret_cast<const uint8_t *>(table) + field;
  if (at < data || at + sizeof(uint64_t) > data + size)
    return false;
  static constexpr uint8_t kZero[sizeof(uint64_t)] = {};
  uint64_t h = fnv1a64From(kFnvOffset, data, static_cast<size_t>(at - data));
  h = fnv1a64From(h, kZero, sizeof kZero);
  out = fnv1a64From(h, at + sizeof kZero, static_cast<size_t>(data + size - at) - sizeof kZero);
  return true;
}

bool stampFingerprint(uint8_t *data, size_t size) {
  uint64_t fp;
  if (!computeFingerprint(data, size, fp))
    return false;
  return plan::GetMutablePlan(data)->mutate_fingerprint(fp);
}

} // namespace dmuon::planfile
