// fuzz_plan: the runtime's plan loader on arbitrary bytes. verifyPlan must
// refuse anything malformed with a message; whatever it accepts, the text,
// JSON, summary and HTML printers must print without fault.
//
// Almost every mutation breaks the plan's fingerprint, which verifyPlan checks
// first; so the input is also verified once more with its fingerprint
// re-stamped, which lets mutations reach the semantic checks and printers.
#include "plan/PlanFile.h"
#include "plan/print/PlanPrinter.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

void printAll(const uint8_t *data) {
  const dmuon::plan::Plan *plan = dmuon::plan::GetPlan(data);
  volatile size_t n = 0;
  n = n + dmuon::planfile::printText(*plan).size();
  n = n + dmuon::planfile::printJson(*plan).size();
  n = n + dmuon::planfile::printSummary(*plan).size();
  n = n + dmuon::planfile::printHtml(*plan).size();
}

void check(const uint8_t *data, size_t size) {
  // FlatBuffers wants its buffer aligned; a loader reads files into a vector.
  std::vector<uint8_t> buf(data, data + size);
  bool ok = false;
  for (bool complete : {false, true})
    if (dmuon::planfile::verifyPlan(buf.data(), buf.size(), complete).empty())
      ok = true;
  if (ok)
    printAll(buf.data());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check(data, size);
  // The same bytes with the fingerprint they hash to. Only after the
  // FlatBuffers verifier has passed (which a fingerprint mismatch says) is it
  // safe to stamp: stampFingerprint is the writer's side and trusts the buffer.
  std::vector<uint8_t> stamped(data, data + size);
  if (dmuon::planfile::verifyPlan(stamped.data(), stamped.size(), false)
              .rfind("fingerprint mismatch", 0) == 0 &&
      dmuon::planfile::stampFingerprint(stamped.data(), stamped.size()))
    check(stamped.data(), stamped.size());
  return 0;
}
