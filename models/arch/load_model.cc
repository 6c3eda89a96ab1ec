#include "models/arch/load_model.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/arch/hybrid_qwen3.h"
#include "models/arch/hybrid_qwen3_config.h"
#include "models/checkpoint.h"
#include "models/mesanet_model.h"

namespace ridge {
namespace {

enum class Architecture { kMesaNet, kHybridQwen3 };

absl::StatusOr<Architecture> ArchitectureOf(const std::filesystem::path& dir,
                                            const nlohmann::json& config) {
  const auto type = config.find("model_type");
  const std::string name =
      type != config.end() && type->is_string() ? type->get<std::string>() : std::string();
  if (name == "mesa_net") return Architecture::kMesaNet;
  if (name == "hybrid_qwen3") return Architecture::kHybridQwen3;
  return absl::InvalidArgumentError(absl::StrCat(
      (dir / "config.json").string(), ": field 'model_type' is '", name,
      "'; supported: \"mesa_net\" (MesaNet) and \"hybrid_qwen3\" (Gated KalmaNet Qwen3 hybrids)"));
}

// The config of a model folder or, where no weights are read, of a config.json-style file named
// directly (tools/bench/configs/*.json).
absl::StatusOr<nlohmann::json> ReadConfig(const std::filesystem::path& dir, bool file_allowed) {
  std::error_code error;
  if (file_allowed && std::filesystem::is_regular_file(dir, error)) return ReadJsonFile(dir);
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::NotFoundError(
        absl::StrCat("model folder ", dir.string(), " does not exist or is not a folder"));
  }
  return ReadJsonFile(dir / "config.json");
}

absl::StatusOr<ModelSpec> NamedFile(const std::filesystem::path& dir,
                                    absl::StatusOr<ModelSpec> spec) {
  if (spec.ok()) return spec;
  return absl::InvalidArgumentError(
      absl::StrCat((dir / "config.json").string(), ": ", spec.status().message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::filesystem::path& dir,
                                                 LoadFormat format, int64_t kv_block_size) {
  ASSIGN_OR_RETURN(const nlohmann::json config, ReadConfig(dir, format == LoadFormat::kRandom));
  ASSIGN_OR_RETURN(const Architecture arch, ArchitectureOf(dir, config));
  const bool random = format == LoadFormat::kRandom;
  if (arch == Architecture::kMesaNet) {
    if (!random) {
      ASSIGN_OR_RETURN(std::unique_ptr<MesaNetModel> model, MesaNetModel::Load(dir));
      return std::unique_ptr<Model>(std::move(model));
    }
    auto mesa = ParseMesaNetConfig(config);
    if (!mesa.ok()) return NamedFile(dir, mesa.status()).status();
    return std::unique_ptr<Model>(
        std::make_unique<MesaNetModel>(*mesa, RandomMesaNetWeights(*mesa, /*seed=*/0)));
  }
  if (!random) {
    ASSIGN_OR_RETURN(std::unique_ptr<HybridQwen3Model> model,
                     HybridQwen3Model::Load(dir, kv_block_size));
    return std::unique_ptr<Model>(std::move(model));
  }
  ASSIGN_OR_RETURN(const ModelSpec spec, NamedFile(dir, ParseHybridQwen3Config(config)));
  ASSIGN_OR_RETURN(std::unique_ptr<HybridQwen3Model> model,
                   HybridQwen3Model::Random(spec, /*seed=*/0, kv_block_size));
  return std::unique_ptr<Model>(std::move(model));
}

absl::StatusOr<ModelSpec> ReadModelSpec(const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(const nlohmann::json config, ReadConfig(dir, /*file_allowed=*/true));
  ASSIGN_OR_RETURN(const Architecture arch, ArchitectureOf(dir, config));
  if (arch == Architecture::kMesaNet) {
    auto mesa = ParseMesaNetConfig(config);
    if (!mesa.ok()) return NamedFile(dir, mesa.status());
    return ToModelSpec(*mesa);
  }
  return NamedFile(dir, ParseHybridQwen3Config(config));
}

}  // namespace ridge
