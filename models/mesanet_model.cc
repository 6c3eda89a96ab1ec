#include "models/mesanet_model.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "models/checkpoint.h"
#include "models/cpu/mesa_mixer.h"

namespace ridge {
namespace {

// The config of model folder `dir` from its config.json's contents; errors name the file.
absl::StatusOr<MesaNetConfig> FolderConfig(const std::filesystem::path& dir,
                                           const nlohmann::json& json) {
  auto config = ParseMesaNetConfig(json);
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat((dir / "config.json").string(), ": ", config.status().message()));
  }
  return config;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MesaNetModel>> MesaNetModel::Load(const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(const MesaNetConfig config, FolderConfig(dir, checkpoint->config()));
  ASSIGN_OR_RETURN(MesaNetWeights weights, LoadMesaNetWeights(*checkpoint, config));
  return std::make_unique<MesaNetModel>(config, std::move(weights));
}

absl::StatusOr<std::unique_ptr<MesaNetModel>> MesaNetModel::Random(const std::filesystem::path& dir,
                                                                   uint64_t seed) {
  ASSIGN_OR_RETURN(const nlohmann::json json, ReadJsonFile(dir / "config.json"));
  ASSIGN_OR_RETURN(const MesaNetConfig config, FolderConfig(dir, json));
  return std::make_unique<MesaNetModel>(config, RandomMesaNetWeights(config, seed));
}

namespace {

DecoderWeights MesaDecoderWeights(const MesaNetConfig& config, const MesaNetWeights& w) {
  const int64_t c = config.hidden_size, v = config.vocab_size, inter = config.intermediate_size;
  const ModelSpec spec = ToModelSpec(config);
  const RecurrentLayout layout = PlanRecurrentLayout(spec);
  DecoderWeights out;
  out.embedding = WeightMatrix::Fp32(w.embeddings.data(), v, c);
  out.head = WeightMatrix::Fp32(w.output_matrix().data(), v, c);
  out.final_norm = w.final_norm;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const MesaLayerWeights& layer = w.layers[l];
    DecoderLayerWeights d;
    d.input_norm = layer.attn_norm;
    d.post_norm = layer.mlp_norm;
    d.mixer = std::make_unique<MesaMixer>(std::get<MesaSpec>(spec.layers[l].mixer), c, &layer,
                                          layout.layer_offset[l]);
    d.gate_up = {WeightMatrix::Fp32(layer.gate_up_proj.data(), 2 * inter, c)};
    d.down = WeightMatrix::Fp32(layer.down_proj.data(), c, inter);
    out.layers.push_back(std::move(d));
  }
  return out;
}

}  // namespace

MesaNetModel::MesaNetModel(MesaNetConfig config, MesaNetWeights weights)
    : config_(config), weights_(std::move(weights)) {
  RIDGE_CHECK(static_cast<int64_t>(weights_.layers.size()) == config_.num_hidden_layers);
  decoder_ = std::make_unique<CpuDecoder>(
      ToModelSpec(config_), MesaDecoderWeights(config_, weights_), /*kv_block_size=*/16);
}

absl::Status MesaNetModel::Forward(std::span<const SequenceChunk> chunks, LogitsFor which,
                                   std::vector<float>* logits) const {
  const size_t state_floats = MesaState(config_).data().size();
  std::vector<CpuSequence> sequences;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& chunk = chunks[i];
    if (chunk.state == nullptr || chunk.state->data().size() != state_floats) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": state of another model"));
    }
    sequences.push_back({.state = chunk.state->mutable_data().data(),
                         .position = chunk.state->tokens(),
                         .tokens = chunk.tokens,
                         .solver = chunk.solver,
                         .stats = chunk.stats,
                         .phase = chunk.phase});
  }
  RETURN_IF_ERROR(decoder_->Forward(sequences, /*kv_storage=*/nullptr, which, logits));
  for (const SequenceChunk& chunk : chunks) chunk.state->AddTokens(chunk.tokens.size());
  return absl::OkStatus();
}

}  // namespace ridge
