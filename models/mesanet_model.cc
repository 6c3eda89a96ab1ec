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
  ASSIGN_OR_RETURN(MesaNetView view, LoadMesaNetView(*checkpoint, config));
  return std::unique_ptr<MesaNetModel>(
      new MesaNetModel(config, std::move(checkpoint), std::move(view)));
}

absl::StatusOr<std::unique_ptr<MesaNetModel>> MesaNetModel::Random(const std::filesystem::path& dir,
                                                                   uint64_t seed) {
  ASSIGN_OR_RETURN(const nlohmann::json json, ReadJsonFile(dir / "config.json"));
  ASSIGN_OR_RETURN(const MesaNetConfig config, FolderConfig(dir, json));
  return std::make_unique<MesaNetModel>(config, RandomMesaNetWeights(config, seed));
}

MesaNetModel::MesaNetModel(MesaNetConfig config, MesaNetWeights weights)
    : config_(config), host_(std::move(weights)) {
  RIDGE_CHECK(static_cast<int64_t>(host_.layers.size()) == config_.num_hidden_layers);
  view_ = ViewOf(host_, config_);
  BuildDecoder();
}

MesaNetModel::MesaNetModel(MesaNetConfig config, std::unique_ptr<Checkpoint> checkpoint,
                           MesaNetView view)
    : config_(config), checkpoint_(std::move(checkpoint)), view_(std::move(view)) {
  BuildDecoder();
}

void MesaNetModel::BuildDecoder() {
  const ModelSpec spec = ToModelSpec(config_);
  const RecurrentLayout layout = PlanRecurrentLayout(spec);
  DecoderWeights weights;
  weights.embedding = view_.embeddings;
  weights.head = view_.output;
  weights.final_norm = view_.final_norm;
  for (size_t l = 0; l < view_.layers.size(); ++l) {
    const MesaLayerView& layer = view_.layers[l];
    DecoderLayerWeights d;
    d.input_norm = layer.attn_norm;
    d.post_norm = layer.mlp_norm;
    d.mixer = std::make_unique<MesaMixer>(std::get<MesaSpec>(spec.layers[l].mixer),
                                          config_.hidden_size, &layer, layout.layer_offset[l]);
    d.gate_up = layer.gate_up;
    d.down = layer.down_proj;
    weights.layers.push_back(std::move(d));
  }
  decoder_ = std::make_unique<CpuDecoder>(spec, std::move(weights), /*kv_block_size=*/16);
}

MesaNetWeights MesaNetModel::HostWeights() const {
  return checkpoint_ != nullptr ? WidenToHost(view_) : host_;
}

absl::Status MesaNetModel::Forward(std::span<const SequenceChunk> chunks, LogitsFor which,
                                   std::vector<float>* logits) const {
  const size_t state_floats = static_cast<size_t>(decoder_->recurrent_layout().floats_per_slot);
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
