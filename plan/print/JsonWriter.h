// A small pretty-printing JSON writer for the JSON form of a plan
// (PrintJson.cpp).
#ifndef DMUON_PLAN_PRINT_JSONWRITER_H
#define DMUON_PLAN_PRINT_JSONWRITER_H

#include "plan/print/PrintCommon.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace dmuon::planfile::print {

// A small pretty-printing JSON writer: 2-space indent, keys in call order.
// "Inline" containers (short scalar lists, coordinate pairs) stay on one line.
class Json {
public:
  std::string out;

  void beginObject(bool inl = false) { open('{', inl); }
  void endObject() { close('}'); }
  void beginArray(bool inl = false) { open('[', inl); }
  void endArray() { close(']'); }
  void key(const char *k) {
    sep();
    quote(k);
    out += ": ";
    pendingKey_ = true;
  }
  void value(const std::string &s) {
    startValue();
    quote(s);
  }
  void value(const char *s) { value(std::string(s)); }
  void value(const flatbuffers::String *s) { value(str(s)); }
  void value(int64_t v) {
    startValue();
    out += num(v);
  }
  void value(int32_t v) { value(int64_t(v)); }
  void value(double v) {
    startValue();
    out += std::isfinite(v) ? num(v) : "null";
  }
  void value(bool b) {
    startValue();
    out += b ? "true" : "false";
  }
  void null() {
    startValue();
    out += "null";
  }
  template <typename T> void field(const char *k, T v) {
    key(k);
    value(v);
  }

private:
  struct Frame {
    bool inl, first;
  };
  std::vector<Frame> st_;
  bool pendingKey_ = false;

  void indent() { out.append(2 * st_.size(), ' '); }
  void sep() {
    if (st_.empty())
      return;
    Frame &f = st_.back();
    if (!f.first)
      out += f.inl ? ", " : ",";
    if (!f.inl) {
      out += '\n';
      indent();
    }
    f.first = false;
  }
  void startValue() {
    if (pendingKey_)
      pendingKey_ = false;
    else
      sep();
  }
  void open(char c, bool inl) {
    startValue();
    out += c;
    bool parentInline = !st_.empty() && st_.back().inl;
    st_.push_back({inl || parentInline, true});
  }
  void close(char c) {
    Frame f = st_.back();
    st_.pop_back();
    if (!f.inl && !f.first) {
      out += '\n';
      indent();
    }
    out += c;
  }
  void quote(const std::string &s) {
    out += '"';
    for (unsigned char ch : s) {
      switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
      }
    }
    out += '"';
  }
};

} // namespace dmuon::planfile::print

#endif
