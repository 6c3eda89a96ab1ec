#include "models/arch/hybrid_qwen3.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/half.h"
#include "base/status_macros.h"
#include "models/cpu/attention_mixer.h"
#include "models/cpu/gka_mixer.h"
#include "models/tensor_reader.h"

namespace ridge {

// Where the loader's tensors come from: a checkpoint or a random generator.
class HybridWeightSource {
 public:
  virtual ~HybridWeightSource() = default;
  virtual absl::StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t rows,
                                              int64_t cols) = 0;
  // A small tensor of `shape`, copied to fp32.
  virtual absl::Status Vector(const std::string& name, std::vector<int64_t> shape,
                              std::vector<float>* out) = 0;
  virtual bool Has(const std::string& name) const = 0;
  virtual absl::Status Finish(bool tied) = 0;
};

namespace {

class CheckpointSource : public HybridWeightSource {
 public:
  explicit CheckpointSource(const Checkpoint& checkpoint) : reader_(checkpoint) {}
  absl::StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t rows,
                                      int64_t cols) override {
    return reader_.Matrix(name, rows, cols);
  }
  absl::Status Vector(const std::string& name, std::vector<int64_t> shape,
                      std::vector<float>* out) override {
    return reader_.Read(name, std::move(shape), out);
  }
  bool Has(const std::string& name) const override { return reader_.Has(name); }
  absl::Status Finish(bool tied) override {
    if (tied) reader_.Ignore("lm_head.weight");  // some exporters write the tied copy too
    return reader_.RefuseUnused();
  }

 private:
  TensorReader reader_;
};

// Uniform values of the given standard deviation from a counter-based hash (fast enough for
// billions of parameters), stored as bf16; vectors by the tensor's role.
class RandomSource : public HybridWeightSource {
 public:
  RandomSource(uint64_t seed, std::vector<std::unique_ptr<uint16_t[]>>* storage)
      : seed_(seed), storage_(storage) {}

  absl::StatusOr<WeightMatrix> Matrix(const std::string&, int64_t rows, int64_t cols) override {
    const int64_t n = rows * cols;
    auto data = std::make_unique<uint16_t[]>(n);
    const float half_width = std::sqrt(3.0f / static_cast<float>(cols));  // std 1/sqrt(cols)
    const uint64_t stream = NextStream();
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) data[i] = FloatToBf16(half_width * Uniform(stream, i));
    const WeightMatrix matrix{reinterpret_cast<const std::byte*>(data.get()), DType::kBF16, rows,
                              cols};
    storage_->push_back(std::move(data));
    return matrix;
  }

  absl::Status Vector(const std::string& name, std::vector<int64_t> shape,
                      std::vector<float>* out) override {
    int64_t n = 1;
    for (int64_t dim : shape) n *= dim;
    const uint64_t stream = NextStream();
    out->resize(n);
    for (int64_t i = 0; i < n; ++i) {
      const float u = Uniform(stream, i);  // in [-1, 1)
      if (name.ends_with("A_log")) {
        (*out)[i] = std::log(8.5f + 7.5f * u);  // decay rates 1 to 16
      } else if (name.ends_with("dt_bias")) {
        (*out)[i] = -4.0f + u;
      } else if (name.ends_with("conv1d.weight")) {
        (*out)[i] = 0.5f * u;
      } else if (name.ends_with(".bias")) {
        (*out)[i] = u;
      } else {  // norm weights
        (*out)[i] = 1.0f + 0.1f * u;
      }
    }
    return absl::OkStatus();
  }

  bool Has(const std::string&) const override { return false; }
  absl::Status Finish(bool) override { return absl::OkStatus(); }

 private:
  uint64_t NextStream() { return seed_ * 0x9e3779b97f4a7c15ull + ++tensors_; }
  static float Uniform(uint64_t stream, int64_t i) {
    uint64_t z = stream * 0xbf58476d1ce4e5b9ull + static_cast<uint64_t>(i) + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f;
  }

  uint64_t seed_, tensors_ = 0;
  std::vector<std::unique_ptr<uint16_t[]>>* storage_;
};

absl::StatusOr<GkaLayerWeights> ReadGkaLayer(HybridWeightSource& source, const GkaSpec& g,
                                             int64_t c, const std::string& prefix);

}  // namespace

absl::StatusOr<std::unique_ptr<HybridQwen3Model>> HybridQwen3Model::Load(
    const std::filesystem::path& dir, const ModelSpec& spec, int64_t kv_block_size) {
  std::unique_ptr<HybridQwen3Model> model(new HybridQwen3Model());
  ASSIGN_OR_RETURN(model->checkpoint_, Checkpoint::Open(dir));
  CheckpointSource source(*model->checkpoint_);
  RETURN_IF_ERROR(model->BuildDecoder(spec, source, kv_block_size));
  return model;
}

absl::StatusOr<std::unique_ptr<HybridQwen3Model>> HybridQwen3Model::Random(const ModelSpec& spec,
                                                                           uint64_t seed,
                                                                           int64_t kv_block_size) {
  std::unique_ptr<HybridQwen3Model> model(new HybridQwen3Model());
  RandomSource source(seed, &model->random_weights_);
  RETURN_IF_ERROR(model->BuildDecoder(spec, source, kv_block_size));
  return model;
}

absl::Status HybridQwen3Model::BuildDecoder(ModelSpec spec, HybridWeightSource& source,
                                            int64_t kv_block_size) {
  const int64_t c = spec.hidden_size, v = spec.vocab_size;
  ASSIGN_OR_RETURN(weights_.embedding, source.Matrix("model.embed_tokens.weight", v, c));
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    const LayerSpec& layer = spec.layers[l];
    const std::string prefix = absl::StrCat("model.layers.", l, ".");
    const int64_t inter = layer.intermediate_size;
    HybridLayerWeights& out = weights_.layers.emplace_back();
    RETURN_IF_ERROR(source.Vector(prefix + "input_layernorm.weight", {c}, &out.input_norm));
    RETURN_IF_ERROR(source.Vector(prefix + "post_attention_layernorm.weight", {c}, &out.post_norm));
    ASSIGN_OR_RETURN(out.gate, source.Matrix(prefix + "mlp.gate_proj.weight", inter, c));
    ASSIGN_OR_RETURN(out.up, source.Matrix(prefix + "mlp.up_proj.weight", inter, c));
    ASSIGN_OR_RETURN(out.down, source.Matrix(prefix + "mlp.down_proj.weight", c, inter));
    if (const auto* g = std::get_if<GkaSpec>(&layer.mixer)) {
      ASSIGN_OR_RETURN(out.mixer, ReadGkaLayer(source, *g, c, prefix + "gka."));
    } else {
      const auto& a = std::get<AttentionSpec>(layer.mixer);
      // hybrid-model-factory's training code saves sliding-window layers under "swa."; the spec
      // (and vLLM) under "self_attn.": both are accepted.
      const bool swa_names = a.window > 0 && source.Has(prefix + "swa.q_proj.weight");
      const std::string attn = prefix + (swa_names ? "swa." : "self_attn.");
      const int64_t d = a.head_dim;
      AttentionLayerWeights w;
      ASSIGN_OR_RETURN(w.q_proj, source.Matrix(attn + "q_proj.weight", a.q_heads * d, c));
      ASSIGN_OR_RETURN(w.k_proj, source.Matrix(attn + "k_proj.weight", a.kv_heads * d, c));
      ASSIGN_OR_RETURN(w.v_proj, source.Matrix(attn + "v_proj.weight", a.kv_heads * d, c));
      ASSIGN_OR_RETURN(w.o_proj, source.Matrix(attn + "o_proj.weight", c, a.q_heads * d));
      RETURN_IF_ERROR(source.Vector(attn + "q_norm.weight", {d}, &w.q_norm));
      RETURN_IF_ERROR(source.Vector(attn + "k_norm.weight", {d}, &w.k_norm));
      out.mixer = std::move(w);
    }
  }
  RETURN_IF_ERROR(source.Vector("model.norm.weight", {c}, &weights_.final_norm));
  if (spec.tie_word_embeddings) {
    weights_.head = weights_.embedding;
  } else {
    ASSIGN_OR_RETURN(weights_.head, source.Matrix("lm_head.weight", v, c));
  }
  RETURN_IF_ERROR(source.Finish(spec.tie_word_embeddings));
  DecoderWeights decoder_weights = HybridDecoderWeights(spec, weights_, kv_block_size);
  decoder_ =
      std::make_unique<CpuDecoder>(std::move(spec), std::move(decoder_weights), kv_block_size);
  return absl::OkStatus();
}

DecoderWeights HybridDecoderWeights(const ModelSpec& spec, const HybridWeights& weights,
                                    int64_t kv_block_size) {
  const int64_t c = spec.hidden_size;
  const RecurrentLayout recurrent = PlanRecurrentLayout(spec);
  const KvLayout kv = PlanKvLayout(spec, kv_block_size);
  DecoderWeights out;
  out.embedding = weights.embedding;
  out.final_norm = weights.final_norm;
  out.head = weights.head;
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    const HybridLayerWeights& w = weights.layers[l];
    DecoderLayerWeights& layer = out.layers.emplace_back();
    layer.input_norm = w.input_norm;
    layer.post_norm = w.post_norm;
    layer.gate_up = {w.gate, w.up};
    layer.down = w.down;
    if (const auto* g = std::get_if<GkaSpec>(&spec.layers[l].mixer)) {
      layer.mixer = std::make_unique<GkaMixer>(*g, c, std::get<GkaLayerWeights>(w.mixer),
                                               recurrent.layer_offset[l]);
    } else {
      const auto& a = std::get<AttentionSpec>(spec.layers[l].mixer);
      const int64_t offset = a.window > 0 ? recurrent.layer_offset[l] : kv.layer_offset[l];
      layer.mixer =
          std::make_unique<AttentionMixer>(a, c, std::get<AttentionLayerWeights>(w.mixer), offset);
    }
  }
  return out;
}

namespace {

absl::StatusOr<GkaLayerWeights> ReadGkaLayer(HybridWeightSource& source, const GkaSpec& g,
                                             int64_t c, const std::string& prefix) {
  const int64_t d = g.head_dim, hx = g.expanded_heads(), w = g.conv_size;
  GkaLayerWeights out;
  ASSIGN_OR_RETURN(out.q_proj, source.Matrix(prefix + "q_proj.weight", g.q_heads * d, c));
  ASSIGN_OR_RETURN(out.k_proj, source.Matrix(prefix + "k_proj.weight", g.k_heads * d, c));
  ASSIGN_OR_RETURN(out.v_proj, source.Matrix(prefix + "v_proj.weight", g.v_heads * d, c));
  ASSIGN_OR_RETURN(out.a_proj, source.Matrix(prefix + "a_proj.weight", hx, c));
  ASSIGN_OR_RETURN(out.b_proj, source.Matrix(prefix + "b_proj.weight", hx, c));
  ASSIGN_OR_RETURN(out.alpha_proj, source.Matrix(prefix + "alpha_proj.weight", hx, c));
  ASSIGN_OR_RETURN(out.g_proj, source.Matrix(prefix + "g_proj.weight", hx * d, c));
  ASSIGN_OR_RETURN(out.o_proj, source.Matrix(prefix + "o_proj.weight", c, hx * d));
  RETURN_IF_ERROR(source.Vector(prefix + "b_proj.bias", {hx}, &out.b_bias));
  RETURN_IF_ERROR(source.Vector(prefix + "alpha_proj.bias", {hx}, &out.alpha_bias));
  RETURN_IF_ERROR(source.Vector(prefix + "A_log", {hx}, &out.decay_rate));
  for (float& rate : out.decay_rate) rate = std::exp(rate);
  RETURN_IF_ERROR(source.Vector(prefix + "dt_bias", {hx}, &out.dt_bias));
  std::vector<float> conv;
  for (const auto& [name, heads] :
       {std::pair{"q_conv1d.weight", g.q_heads}, std::pair{"k_conv1d.weight", g.k_heads},
        std::pair{"v_conv1d.weight", g.v_heads}}) {
    RETURN_IF_ERROR(source.Vector(prefix + name, {heads * d, 1, w}, &conv));
    out.conv.insert(out.conv.end(), conv.begin(), conv.end());
  }
  RETURN_IF_ERROR(source.Vector(prefix + "o_norm.weight", {d}, &out.o_norm));
  return out;
}

}  // namespace

}  // namespace ridge
