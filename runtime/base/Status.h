// The runtime's internal error value; the C API turns it into a status code
// and a last-error message. The runtime's lowest floor (base/): every other
// folder stands on it, and it on the public C header alone.
#ifndef DMUON_RUNTIME_BASE_STATUS_H
#define DMUON_RUNTIME_BASE_STATUS_H

#include "dmuon/dmuon.h"

#include <cstdio>
#include <string>
#include <utility>

namespace dmuon::rt {

class Status {
public:
  Status() = default;
  Status(dmuon_status_t code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool isOk() const { return code_ == DMUON_SUCCESS; }
  explicit operator bool() const { return isOk(); }
  dmuon_status_t code() const { return code_; }
  const std::string &message() const { return message_; }

private:
  dmuon_status_t code_ = DMUON_SUCCESS;
  std::string message_;
};

inline Status invalidArgument(std::string m) { return {DMUON_ERROR_INVALID_ARGUMENT, std::move(m)}; }
inline Status invalidState(std::string m) { return {DMUON_ERROR_INVALID_STATE, std::move(m)}; }
inline Status mismatch(std::string m) { return {DMUON_ERROR_MISMATCH, std::move(m)}; }
inline Status unsupported(std::string m) { return {DMUON_ERROR_UNSUPPORTED, std::move(m)}; }
inline Status backendError(std::string m) { return {DMUON_ERROR_BACKEND, std::move(m)}; }

// "1.5" rather than std::to_string's "1.500000", for messages.
inline std::string formatNumber(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

#define DMUON_RETURN_IF_ERROR(expr)                                                        \
  do {                                                                                     \
    ::dmuon::rt::Status _s = (expr);                                                       \
    if (!_s.isOk())                                                                        \
      return _s;                                                                           \
  } while (0)

} // namespace dmuon::rt

#endif
