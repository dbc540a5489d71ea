// What the TOML readers (manifests, cluster descriptions) share: the bound on
// dotted keys checked before parsing, the parse with its error located, and
// the name of a node's kind for "must be an integer, not a string".
#ifndef DMUON_SUPPORT_TOMLNODES_H
#define DMUON_SUPPORT_TOMLNODES_H

#include "support/Diagnostics.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <toml++/toml.h>

#include <string>
#include <string_view>

namespace dmuon {

// "; did you mean 'shape'?" for a near miss among `keys`, else "".
inline std::string didYouMean(llvm::StringRef key, llvm::ArrayRef<const char *> keys) {
  unsigned best = 3;
  const char *suggestion = nullptr;
  for (const char *cand : keys)
    if (unsigned d = key.edit_distance(cand, true, best); d < best) {
      best = d;
      suggestion = cand;
    }
  if (!suggestion || key.size() <= 1)
    return {};
  return std::string("; did you mean '") + suggestion + "'?";
}

inline const char *tomlTypeName(const toml::node &n) {
  switch (n.type()) {
  case toml::node_type::table:
    return "a table";
  case toml::node_type::array:
    return "an array";
  case toml::node_type::string:
    return "a string";
  case toml::node_type::integer:
    return "an integer";
  case toml::node_type::floating_point:
    return "a float";
  case toml::node_type::boolean:
    return "a boolean";
  case toml::node_type::date:
    return "a date";
  case toml::node_type::time:
    return "a time";
  case toml::node_type::date_time:
    return "a date-time";
  default:
    return "nothing";
  }
}

// toml++ recurses once per dotted-key component: a key of more than
// `maxDots` components (outside strings and comments) on one line is
// refused before parsing, so absurd keys (`[a.a.a...]` with 100k parts)
// cannot exhaust the stack.
inline bool checkTomlKeyDepth(std::string_view text, unsigned buffer, Diagnostics &diags,
                              unsigned maxDots) {
  unsigned line = 1, dots = 0;
  char quote = 0;
  bool comment = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      dots = 0;
      quote = 0;
      comment = false;
    } else if (comment) {
    } else if (quote) {
      if (c == '\\' && quote == '"')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#') {
      comment = true;
    } else if (c == '.' && ++dots > maxDots) {
      diags.error(diags.locFor(buffer, line, 1),
                  "key nested more than " + llvm::Twine(maxDots) + " levels deep");
      return false;
    }
  }
  return true;
}

// Parses `text` (file `name`); a syntax error is reported where `locOf`
// (toml::source_position -> SMLoc) puts it, or on the file.
template <typename LocOf>
bool parseTomlLocated(std::string_view text, const std::string &name, Diagnostics &diags,
                      LocOf locOf, toml::table &out) {
  try {
    out = toml::parse(text, name);
  } catch (const toml::parse_error &err) {
    llvm::SMLoc loc = locOf(err.source().begin);
    if (loc.isValid())
      diags.error(loc, std::string(err.description()));
    else
      diags.fileError(name, std::string(err.description()));
    return false;
  } catch (const std::exception &e) {
    diags.fileError(name, e.what());
    return false;
  }
  return true;
}

} // namespace dmuon

#endif
