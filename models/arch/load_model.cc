#include "models/arch/load_model.h"

#include <algorithm>

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

// Qwen lists its end-of-sequence ids in generation_config.json (config.json often names only
// one): generation stops on every id of either file.
absl::Status MergeGenerationEos(const std::filesystem::path& dir, nlohmann::json* config) {
  std::error_code error;
  const std::filesystem::path file = dir / "generation_config.json";
  if (!std::filesystem::is_regular_file(file, error)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const nlohmann::json generation, ReadJsonFile(file));
  if (!generation.is_object() || !generation.contains("eos_token_id")) return absl::OkStatus();
  nlohmann::json ids = nlohmann::json::array();
  const nlohmann::json from_config =
      config->contains("eos_token_id") ? (*config)["eos_token_id"] : nlohmann::json();
  for (const nlohmann::json* source : {&from_config, &generation.at("eos_token_id")}) {
    if (source->is_null()) continue;
    const nlohmann::json list = source->is_array() ? *source : nlohmann::json::array({*source});
    for (const auto& id : list) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  }
  (*config)["eos_token_id"] = ids;  // checked (integers in the vocabulary) by the parser
  return absl::OkStatus();
}

absl::StatusOr<ModelSpec> NamedFile(const std::filesystem::path& dir,
                                    absl::StatusOr<ModelSpec> spec) {
  if (spec.ok()) return spec;
  return absl::InvalidArgumentError(
      absl::StrCat((dir / "config.json").string(), ": ", spec.status().message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::filesystem::path& dir,
                                                 LoadFormat format, int64_t kv_block_size,
                                                 uint64_t random_seed) {
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
        std::make_unique<MesaNetModel>(*mesa, RandomMesaNetWeights(*mesa, random_seed)));
  }
  nlohmann::json merged = config;
  if (!random) RETURN_IF_ERROR(MergeGenerationEos(dir, &merged));
  ASSIGN_OR_RETURN(const ModelSpec spec, NamedFile(dir, ParseHybridQwen3Config(merged)));
  ASSIGN_OR_RETURN(std::unique_ptr<HybridQwen3Model> model,
                   random ? HybridQwen3Model::Random(spec, random_seed, kv_block_size)
                          : HybridQwen3Model::Load(dir, spec, kv_block_size));
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
  nlohmann::json merged = config;
  std::error_code error;
  if (std::filesystem::is_directory(dir, error)) RETURN_IF_ERROR(MergeGenerationEos(dir, &merged));
  return NamedFile(dir, ParseHybridQwen3Config(merged));
}

}  // namespace ridge
