// One sequence's whole MesaNet memory as a value: per layer the fp32 matrices Hs and Gs of
// every head and the raw q/k projection tails for the short convolutions. Its size depends
// only on the config, never on the sequence length, so it can be copied, saved and restored.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "models/mesanet_config.h"

namespace ridge {

class MesaState {
 public:
  explicit MesaState(const MesaNetConfig& config);

  float* hs(int64_t layer) { return data_.data() + layer * layer_stride_; }
  float* gs(int64_t layer) { return hs(layer) + matrix_floats_; }
  // Raw q_proj / k_proj outputs of the last conv_size-1 tokens, oldest first: [W-1, K].
  float* q_tail(int64_t layer) { return gs(layer) + matrix_floats_; }
  float* k_tail(int64_t layer) { return q_tail(layer) + tail_floats_; }

  // Tokens consumed so far; a state with none is the start of a sequence.
  int64_t tokens() const { return tokens_; }
  void AddTokens(int64_t n) { tokens_ += n; }

  std::span<const float> data() const { return data_; }
  std::span<float> mutable_data() { return data_; }
  void Reset();

  // A self-describing binary snapshot; Restore checks that it fits this model.
  std::string Serialize() const;
  static absl::StatusOr<MesaState> Deserialize(const MesaNetConfig& config, std::string_view bytes);

 private:
  int64_t num_layers_, num_heads_, head_dim_, conv_size_;
  int64_t matrix_floats_, tail_floats_, layer_stride_;
  int64_t tokens_ = 0;
  std::vector<float> data_;
};

}  // namespace ridge
