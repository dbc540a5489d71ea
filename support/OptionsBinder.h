// Binds the fields of an options struct to command-line flags, IREE's way:
// the struct declares its flags once, each flag writes its field directly
// (so the struct's initializers are the defaults, and nothing copies the
// flags into it), and a flag can also note that the user gave it. The
// flags live as long as the binder; bind before parsing the command line.
#ifndef DMUON_SUPPORT_OPTIONSBINDER_H
#define DMUON_SUPPORT_OPTIONSBINDER_H

#include "llvm/Support/CommandLine.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace dmuon {

class OptionsBinder {
public:
  // The flags bound from here on are listed under `category` in --help.
  void setCategory(llvm::cl::OptionCategory &category) { category_ = &category; }

  // A flag that writes `field`.
  template <typename T, typename... Mods> void opt(T &field, Mods &&...mods) {
    add(std::make_unique<llvm::cl::opt<T, true>>(std::forward<Mods>(mods)...,
                                                 llvm::cl::location(field)));
  }
  // The same, and `given` set when the user passes it.
  template <typename T, typename... Mods> void opt(T &field, bool &given, Mods &&...mods) {
    add(std::make_unique<llvm::cl::opt<T, true>>(
        std::forward<Mods>(mods)..., llvm::cl::location(field),
        llvm::cl::callback([&given](const T &) { given = true; })));
  }
  // A flag whose field stays empty unless the user passes it.
  template <typename T, typename... Mods> void opt(std::optional<T> &field, Mods &&...mods) {
    add(std::make_unique<llvm::cl::opt<T>>(
        std::forward<Mods>(mods)..., llvm::cl::callback([&field](const T &v) { field = v; })));
  }

  // A flag that may be given many times, each value appended to `field`.
  template <typename T, typename... Mods> void list(std::vector<T> &field, Mods &&...mods) {
    add(std::make_unique<llvm::cl::list<T, std::vector<T>>>(std::forward<Mods>(mods)...,
                                                            llvm::cl::location(field)));
  }

private:
  void add(std::unique_ptr<llvm::cl::Option> flag) {
    if (category_)
      flag->addCategory(*category_);
    flags_.push_back(std::move(flag));
  }

  llvm::cl::OptionCategory *category_ = nullptr;
  std::vector<std::unique_ptr<llvm::cl::Option>> flags_;
};

} // namespace dmuon

#endif
