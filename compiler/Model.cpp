#include "Model.h"

namespace dmuon {

std::optional<DType> parseDType(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "fp32" || name == "float")
    return DType::f32;
  if (name == "bf16" || name == "bfloat16")
    return DType::bf16;
  if (name == "f16" || name == "float16" || name == "fp16" || name == "half")
    return DType::f16;
  if (name == "f64" || name == "float64" || name == "fp64" || name == "double")
    return DType::f64;
  return std::nullopt;
}

const char *stageName(Stage s) { return plan::EnumNameStage(s); }

std::optional<Stage> parseStage(std::string_view name) {
  for (Stage s : plan::EnumValuesStage())
    if (name == plan::EnumNameStage(s))
      return s;
  return std::nullopt;
}

int64_t Param::localNumElements() const {
  int64_t n = 1;
  for (int64_t d : localShape)
    n *= d;
  return n;
}

MatrixView matrixViewOf(const std::vector<int64_t> &shape, bool conv) {
  MatrixView v;
  size_t n = shape.size();
  if (n < 2) {
    v.rows = n == 1 ? 1 : 0;
    v.cols = n == 1 ? shape[0] : 0;
    return v;
  }
  if (conv) {
    // Conv weights [out, in, k...] are orthogonalized as [out, in*k...].
    v.rows = shape[0];
    v.cols = 1;
    for (size_t i = 1; i < n; ++i)
      v.cols *= shape[i];
    return v;
  }
  for (size_t i = 0; i + 2 < n; ++i)
    v.batch *= shape[i];
  v.rows = shape[n - 2];
  v.cols = shape[n - 1];
  return v;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s.append(i ? "," : "").append(std::to_string(shape[i]));
  return s + "]";
}

int64_t Param::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

} // namespace dmuon
