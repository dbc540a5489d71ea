// Which param names dmuon accepts (docs/manifest-format.md, "Param names").
// One rule for dmuonc's frontends, the plan verifier, the runtime's C ABI and
// checkpoint shards, so a name that compiles can also be bound, saved and
// loaded again.
#ifndef DMUON_COMMON_PARAMNAMES_H
#define DMUON_COMMON_PARAMNAMES_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dmuon::common {

// The longest param name in bytes. Checkpoint shards store a name's length
// in 16 bits; 4096 leaves room and is far above any framework's names.
inline constexpr size_t kMaxParamNameBytes = 4096;

namespace detail {

inline std::string hexByte(unsigned v) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", v);
  return std::string(text);
}

// The length of the UTF-8 character at text[i] when it is valid UTF-8 and
// no control character (U+0000-U+001F, U+007F-U+009F); 0 otherwise, with
// `why` saying which ("is not valid UTF-8 (byte 0xff at byte 3)").
inline size_t printableCharAt(std::string_view text, size_t i, std::string *why) {
  const auto lead = static_cast<unsigned char>(text[i]);
  size_t len = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3
                             : (lead >> 3) == 0x1e  ? 4 : 0;
  uint32_t cp = len == 1 ? lead : len == 2 ? lead & 0x1f : len == 3 ? lead & 0x0f : lead & 0x07;
  bool valid = len != 0 && i + len <= text.size();
  for (size_t k = 1; valid && k < len; ++k) {
    const auto c = static_cast<unsigned char>(text[i + k]);
    valid = (c & 0xc0) == 0x80;
    cp = (cp << 6) | (c & 0x3f);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  static constexpr uint32_t kMinOfLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (valid && (cp < kMinOfLength[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)))
    valid = false;
  if (!valid) {
    if (why)
      *why = "is not valid UTF-8 (byte " + hexByte(lead) + " at byte " + std::to_string(i) + ")";
    return 0;
  }
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) {
    if (why)
      *why = "contains a control character (" + hexByte(cp) + ") at byte " + std::to_string(i);
    return 0;
  }
  return len;
}

} // namespace detail

// Empty when `text` is valid UTF-8 without control characters (U+0000-U+001F,
// U+007F-U+009F): what every string dmuon prints from an input must be. A
// NUL would cut it short at the C ABI; a newline or tab would forge lines or
// fields of the line-oriented text form; an escape code would reach the
// terminal; invalid UTF-8 would break JSON. Otherwise a short reason, e.g.
// "contains a control character (0x0a) at byte 3".
inline std::string textProblem(std::string_view text) {
  std::string why;
  for (size_t i = 0; i < text.size();) {
    const size_t len = detail::printableCharAt(text, i, &why);
    if (len == 0)
      return why;
    i += len;
  }
  return {};
}

// Empty when `name` is allowed: 1 to kMaxParamNameBytes bytes of text
// (textProblem). Otherwise a short reason.
inline std::string paramNameProblem(std::string_view name) {
  if (name.empty())
    return "is empty";
  if (name.size() > kMaxParamNameBytes)
    return "is " + std::to_string(name.size()) + " bytes long (at most " +
           std::to_string(kMaxParamNameBytes) + ")";
  return textProblem(name);
}

// `text` with every byte textProblem would refuse as \xNN (so it passes
// textProblem); valid UTF-8 without control characters is kept as it is,
// backslashes included. For free text dmuonc stores or prints as given (a
// path or a regex on the command line, a note quoting an input's node name).
inline std::string escapedText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t len = detail::printableCharAt(text, i, nullptr);
    if (len == 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(text[i]));
      out += hex;
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

// `name` for a message: control characters and bytes outside printable
// ASCII as \xNN, cut to its first 64 bytes ("...") when longer.
inline std::string printableName(std::string_view name) {
  constexpr size_t kShown = 64;
  std::string out;
  for (size_t i = 0; i < name.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char text[8];
      std::snprintf(text, sizeof text, "\\x%02x", c);
      out += text;
    }
  }
  if (name.size() > kShown)
    out += "...";
  return out;
}

// "the allowed names", for messages that refuse one.
inline std::string paramNameRuleText() {
  return "a param name is 1 to " + std::to_string(kMaxParamNameBytes) +
         " bytes of UTF-8 without control characters";
}

} // namespace dmuon::common

#endif
