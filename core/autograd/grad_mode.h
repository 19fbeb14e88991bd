// Whether ops record autograd history, per thread (as PyTorch's GradMode).
#pragma once

namespace minidl::autograd {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Sets grad mode for a scope and restores the previous one.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

}  // namespace minidl::autograd

namespace minidl {
// { NoGradGuard g; ... } : no history is recorded inside the scope.
class NoGradGuard : public autograd::AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};
}  // namespace minidl
