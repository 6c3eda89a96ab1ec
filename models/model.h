// A loaded model, whatever its architecture: its spec and the CPU decoder runner over its
// weights. Architecture loaders (models/arch/load_model.h) return one.
#pragma once

#include "models/cpu/decoder.h"
#include "models/model_spec.h"

namespace ridge {

class MesaNetModel;
struct HybridWeights;

class Model {
 public:
  virtual ~Model() = default;
  const ModelSpec& spec() const { return decoder().spec(); }
  virtual const CpuDecoder& decoder() const = 0;
  // The MesaNet form (config and fp32 host weights) the CUDA backend uploads; null for
  // architectures that backend does not run yet.
  virtual const MesaNetModel* mesanet() const { return nullptr; }
  // The hybrid_qwen3 form (views of the checkpoint's tensors) the CUDA hybrid backend uploads;
  // null for other architectures.
  virtual const HybridWeights* hybrid_weights() const { return nullptr; }
};

}  // namespace ridge
