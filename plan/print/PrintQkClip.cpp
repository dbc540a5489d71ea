#include "plan/print/PrintQkClip.h"

namespace dmuon::planfile::print {

void textQkClip(const View &v, std::string &o) {
  const auto *pairs = v.p.qk_clip();
  if (!v.reached(plan::Stage::validate) || size(pairs) == 0)
    return;
  o += "qk_clip:\n";
  for (uint32_t i = 0; i < size(pairs); ++i) {
    const plan::QkClipPair *q = pairs->Get(i);
    o += "qk_clip " + v.paramName(q->query()) + " key=" + v.paramName(q->key()) +
         " heads=" + num(int64_t(q->heads())) + " key_heads=" + num(int64_t(q->key_heads())) +
         " head_dim=" + num(int64_t(q->head_dim())) + "\n";
  }
}

void jsonQkClip(Json &j, const View &v) {
  if (!v.reached(plan::Stage::validate))
    return;
  const auto *pairs = v.p.qk_clip();
  j.key("qk_clip");
  j.beginArray();
  for (uint32_t i = 0; i < size(pairs); ++i) {
    const plan::QkClipPair *q = pairs->Get(i);
    j.beginObject(true);
    j.field("query", v.paramName(q->query()));
    j.field("key", v.paramName(q->key()));
    j.field("heads", q->heads());
    j.field("key_heads", q->key_heads());
    j.field("head_dim", q->head_dim());
    j.endObject();
  }
  j.endArray();
}

} // namespace dmuon::planfile::print
