// The model as data: what every layer of a checkpoint is, independent of where it runs. An
// architecture's loader (models/arch) reads config.json into a ModelSpec; everything below the
// loader (runners, mixers, memory planning, the engine) reads the spec and never the model
// type. See docs/DESIGN.md, "The model as data".
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace ridge {

// MesaNet's token mixer (shared/specs/mesanet.md): conjugate gradient on a decayed Gram matrix.
struct MesaSpec {
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t conv_size = 4;
  bool use_output_gate = false;
  double lambda_lower_bound = 0.25;
  double norm_eps = 1e-6;
  int32_t default_iterations = 30;  // max_cg_step_decoding
};

// Gated KalmaNet's token mixer (shared/specs/gka-hybrid-qwen3.md, sections 3-4): Chebyshev
// iteration on a decayed Gram matrix with an adaptive ridge.
struct GkaSpec {
  int64_t q_heads = 0, k_heads = 0, v_heads = 0;
  int64_t head_dim = 0;
  int64_t conv_size = 4;
  int32_t num_iter = 30;  // the default iteration cap; 0 means no solve (plain gated attention)
  double ridge_strength = 0.02;
  bool use_alpha_connection = true;
  bool use_v_conv = true;
  bool use_beta_gate = true;
  bool use_gate = true;
  double norm_eps = 1e-6;

  // Hx: the heads after expansion, each with its own state.
  int64_t expanded_heads() const;
};

struct RopeSpec {
  enum class Type { kDefault, kYarn };
  Type type = Type::kDefault;
  double theta = 10000.0;
  // yarn only.
  double factor = 1.0;
  int64_t original_max_position = 0;
  double beta_fast = 32.0, beta_slow = 1.0;
  double attention_factor = 1.0;  // multiplies cos and sin (yarn's mscale; 1 for default)
  bool truncate = true;
};

// Qwen3 softmax attention: GQA, per-head q/k RMSNorm, RoPE; `window` > 0 makes it a sliding
// window layer (a query at t sees keys in (t - window, t]).
struct AttentionSpec {
  int64_t q_heads = 0, kv_heads = 0;
  int64_t head_dim = 0;
  double qk_norm_eps = 1e-6;
  RopeSpec rope;
  int64_t window = 0;
};

using MixerSpec = std::variant<MesaSpec, GkaSpec, AttentionSpec>;

struct LayerSpec {
  MixerSpec mixer;
  int64_t intermediate_size = 0;  // SwiGLU MLP width
};

struct ModelSpec {
  std::string architecture;  // "mesanet", "hybrid_qwen3": for logs and /v1/models only
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;            // -1 when absent
  std::vector<int64_t> eos_token_ids;   // generation stops on any of them
  int64_t max_position_embeddings = 0;  // 0 when unbounded
  std::vector<LayerSpec> layers;

  bool IsEos(int64_t token) const;
  // One symbol per layer, joined by '-': "MESA", "GKA", "*" (full attention), "SWA".
  std::string LayerPattern() const;
  int64_t CountLayers(bool (*is_kind)(const MixerSpec&)) const;
  int64_t ParameterCount() const;
};

// The query heads and head size of a layer's mixer (the first layer's, for a model summary).
struct HeadShape {
  int64_t heads = 0, head_dim = 0;
};
HeadShape MixerHeads(const MixerSpec& mixer);
HeadShape FirstLayerHeads(const ModelSpec& spec);

bool IsMesa(const MixerSpec& mixer);
bool IsGka(const MixerSpec& mixer);
bool IsAttention(const MixerSpec& mixer);
// "mesa", "gka" or "attention": the layer_type label of metrics and logs.
const char* MixerKindName(const MixerSpec& mixer);

// The iteration cap a request gets when it sets none: the recurrent layers' own default
// (MesaNet's max_cg_step_decoding, GKA's num_iter; at least 1), or 30 without recurrent layers.
int32_t DefaultSolverIterations(const ModelSpec& spec);
// The solver series' layer_type label: "mesa" or "gka" for the model's recurrent layers, ""
// when it has none.
const char* RecurrentLayerType(const ModelSpec& spec);

// Where each layer's fixed-size memory lies in a sequence's state slot (fp32 floats), so no code
// assumes that every layer is recurrent or that all layers are alike. Recurrent layers keep their
// state there; sliding-window attention layers keep there the keys and values of their last
// `window` positions (a ring: position p at p % window), which is all they ever read.
struct RecurrentLayout {
  std::vector<int64_t> layer_offset;  // per layer; -1 for layers without recurrent state
  int64_t floats_per_slot = 0;

  int64_t bytes_per_slot() const { return floats_per_slot * 4; }
};

// Floats of fixed-size state one layer needs (0 for full attention).
int64_t RecurrentStateFloats(const MixerSpec& mixer);
RecurrentLayout PlanRecurrentLayout(const ModelSpec& spec);

// Where each full-attention layer's keys and values lie in a KV block: a block holds
// `block_size` consecutive token positions of every full-attention layer of one sequence; a
// layer's part is its keys, then its values (the CPU's: [block_size, kv_heads * head_dim] each,
// fp32; a GPU backend's may order a part differently and store other elements, with
// element_bytes saying their size). (Sliding-window layers keep theirs in the state slot:
// RecurrentLayout.)
struct KvLayout {
  int64_t block_size = 16;
  std::vector<int64_t> layer_offset;  // per layer, elements into a block; -1 for other layers
  int64_t floats_per_token = 0;       // elements of K and V of every full-attention layer
  int64_t element_bytes = 4;          // 4 (fp32, the CPU's) or 2 (bf16)

  bool empty() const { return floats_per_token == 0; }
  int64_t floats_per_block() const { return floats_per_token * block_size; }
  int64_t bytes_per_token() const { return floats_per_token * element_bytes; }
  int64_t bytes_per_block() const { return floats_per_block() * element_bytes; }
  // Blocks that hold `tokens` positions.
  int64_t BlocksFor(int64_t tokens) const {
    return empty() || tokens <= 0 ? 0 : (tokens + block_size - 1) / block_size;
  }
};

KvLayout PlanKvLayout(const ModelSpec& spec, int64_t block_size);

}  // namespace ridge
