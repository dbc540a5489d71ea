#include "Placement.h"

#include <cctype>

namespace dmuon {

std::string Placement::str() const {
  switch (kind) {
  case PlacementKind::replicate:
    return "Replicate";
  case PlacementKind::shard:
    return "Shard(" + std::to_string(dim) + ")";
  case PlacementKind::strided_shard:
    return "StridedShard(" + std::to_string(dim) + ", " +
           std::to_string(splitFactor) + ")";
  case PlacementKind::partial:
    return "Partial(" + reduceOp + ")";
  }
  return "?";
}

std::string Placement::groupKey() const {
  if (isShard())
    return "Shard(" + std::to_string(dim) + ")";
  return str();
}

namespace {

struct Cursor {
  std::string_view text;
  size_t pos = 0;
  void skipSpace() {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }
  bool eat(char c) {
    skipSpace();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  std::string_view ident() {
    skipSpace();
    size_t b = pos;
    while (pos < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_'))
      ++pos;
    return text.substr(b, pos - b);
  }
  bool integer(long long &v) {
    skipSpace();
    size_t b = pos;
    bool neg = false;
    if (pos < text.size() && text[pos] == '-') {
      neg = true;
      ++pos;
    }
    size_t digits = pos;
    v = 0;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      v = v * 10 + (text[pos] - '0');
      if (v > (1LL << 31)) {
        pos = b;
        return false;
      }
      ++pos;
    }
    if (pos == digits) {
      pos = b;
      return false;
    }
    if (neg)
      v = -v;
    return true;
  }
};

} // namespace

bool parsePlacement(std::string_view text, Placement &out, std::string &error,
                    size_t &errorCol) {
  Cursor c{text};
  auto fail = [&](std::string msg) {
    error = std::move(msg);
    errorCol = c.pos;
    return false;
  };
  size_t nameCol = (c.skipSpace(), c.pos);
  std::string_view name = c.ident();
  Placement p;
  if (name == "Replicate") {
    p.kind = PlacementKind::replicate;
    if (c.eat('(') && !c.eat(')'))
      return fail("expected ')' after 'Replicate('");
  } else if (name == "Shard" || name == "StridedShard") {
    p.kind = name == "Shard" ? PlacementKind::shard : PlacementKind::strided_shard;
    if (!c.eat('('))
      return fail("expected '(' after '" + std::string(name) + "'");
    long long d;
    if (!c.integer(d))
      return fail("expected a tensor dim in '" + std::string(name) + "(...)'");
    p.dim = static_cast<int>(d);
    if (p.kind == PlacementKind::strided_shard) {
      if (!c.eat(','))
        return fail("expected ', split_factor' in 'StridedShard(dim, split_factor)'");
      long long k;
      if (!c.integer(k) || k < 1)
        return fail("expected a positive split factor");
      p.splitFactor = static_cast<int>(k);
    }
    if (!c.eat(')'))
      return fail("expected ')'");
  } else if (name == "Partial") {
    p.kind = PlacementKind::partial;
    if (c.eat('(')) {
      std::string_view op = c.ident();
      if (op.empty()) {
        if (!c.eat(')'))
          return fail("expected a reduce op such as 'sum' or 'avg'");
      } else {
        if (op != "sum" && op != "avg" && op != "max" && op != "min")
          return fail("unknown Partial reduce op '" + std::string(op) +
                      "' (expected sum, avg, max or min)");
        p.reduceOp = std::string(op);
        if (!c.eat(')'))
          return fail("expected ')'");
      }
    }
  } else {
    c.pos = nameCol;
    return fail("unknown placement '" + std::string(text) +
                "' (expected Replicate, Shard(d), StridedShard(d, k) or Partial(op))");
  }
  c.skipSpace();
  if (c.pos != text.size())
    return fail("unexpected text after placement");
  out = p;
  return true;
}

} // namespace dmuon
