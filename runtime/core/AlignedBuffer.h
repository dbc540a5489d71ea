// A byte buffer aligned like the plan's packed layout, allocated on demand
// and freed on reshard so that memory follows the lifecycle.
#ifndef DMUON_RUNTIME_CORE_ALIGNEDBUFFER_H
#define DMUON_RUNTIME_CORE_ALIGNEDBUFFER_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

namespace dmuon::rt {

class AlignedBuffer {
public:
  static constexpr size_t kAlignment = 256;

  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
  AlignedBuffer(AlignedBuffer &&o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  AlignedBuffer &operator=(AlignedBuffer &&o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~AlignedBuffer() { release(); }

  // Throws std::bad_alloc; the C API maps it to DMUON_ERROR_OUT_OF_MEMORY.
  void allocate(size_t bytes, bool zero) {
    release();
    if (bytes == 0)
      bytes = kAlignment; // a live buffer always has storage
    data_ = static_cast<uint8_t *>(::operator new(bytes, std::align_val_t(kAlignment)));
    size_ = bytes;
    if (zero)
      std::memset(data_, 0, bytes);
  }
  void release() {
    if (data_)
      ::operator delete(data_, std::align_val_t(kAlignment));
    data_ = nullptr;
    size_ = 0;
  }
  bool live() const { return data_ != nullptr; }
  uint8_t *data() { return data_; }
  const uint8_t *data() const { return data_; }
  float *floats() { return reinterpret_cast<float *>(data_); }
  size_t size() const { return size_; }

private:
  uint8_t *data_ = nullptr;
  size_t size_ = 0;
};

} // namespace dmuon::rt

#endif
