// Megatron's loss scaling for --fp16 (megatron/core/optimizer/grad_scaler.py),
// as a pure state machine: the trainer scales the loss by scale(), unscales the
// gradients, and calls update(found_inf) after each step; a step with inf/nan
// gradients is skipped.
//
// Dynamic (default): start at --initial-loss-scale (2^32); on an overflow the
// hysteresis counter drops and, when it reaches 0, the scale is multiplied by
// the backoff factor (0.5) but kept >= --min-loss-scale; after
// --loss-scale-window (1000) clean steps in a row the scale doubles and the
// hysteresis (--hysteresis, 2) is restored. Static (--loss-scale S): always S.
#pragma once

#include <algorithm>
#include <cstdint>

namespace zlm::trainer {

class LossScaler {
 public:
  LossScaler(double initial, double min_scale, int64_t window, int64_t hysteresis, bool dynamic)
      : scale_(initial), min_(min_scale), window_(window), hysteresis_(hysteresis), hysteresis_left_(hysteresis), dynamic_(dynamic) {}
  double scale() const { return scale_; }
  // What Megatron's DynamicGradScaler saves: the scale, the clean steps since the last overflow
  // or growth (growth_tracker) and the overflows the hysteresis still allows (hysteresis_tracker).
  struct State {
    double scale = 0;
    int64_t growth_tracker = 0, hysteresis_tracker = 0;
  };
  State state() const { return {scale_, clean_steps_, hysteresis_left_}; }
  // A saved state (a resumed run's); a static scale keeps its --loss-scale.
  void restore(const State& s) {
    if (!dynamic_ || s.scale <= 0) return;
    scale_ = s.scale;
    clean_steps_ = std::clamp<int64_t>(s.growth_tracker, 0, window_ - 1);
    hysteresis_left_ = std::min(s.hysteresis_tracker, hysteresis_);
  }
  void update(bool found_inf) {
    if (!dynamic_) return;
    if (found_inf) {
      clean_steps_ = 0;
      if (--hysteresis_left_ <= 0) scale_ = std::max(scale_ * 0.5, min_);
      return;
    }
    if (++clean_steps_ == window_) {
      clean_steps_ = 0;
      hysteresis_left_ = hysteresis_;
      scale_ *= 2.0;
    }
  }

 private:
  double scale_, min_;
  int64_t window_, hysteresis_, hysteresis_left_, clean_steps_ = 0;
  bool dynamic_;
};

}  // namespace zlm::trainer
