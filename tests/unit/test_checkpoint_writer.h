// Writes safetensors files and checkpoint folders for tests, including deliberately broken ones.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace ridge::testing {

struct RawTensor {
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::vector<float> values;  // written as F32 (other dtypes: raw bytes below)
  std::string raw_bytes;      // used instead of values when not empty
};

inline std::string TensorBytes(const RawTensor& t) {
  if (!t.raw_bytes.empty()) return t.raw_bytes;
  return std::string(reinterpret_cast<const char*>(t.values.data()),
                     t.values.size() * sizeof(float));
}

// Builds header JSON with consecutive offsets; returns header and payload.
inline void BuildSafetensors(const std::map<std::string, RawTensor>& tensors,
                             nlohmann::json* header, std::string* payload) {
  *header = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    const std::string bytes = TensorBytes(t);
    (*header)[name] = {{"dtype", t.dtype},
                       {"shape", t.shape},
                       {"data_offsets", {payload->size(), payload->size() + bytes.size()}}};
    *payload += bytes;
  }
}

inline void WriteRawSafetensors(const std::filesystem::path& path, const std::string& header_json,
                                const std::string& payload, uint64_t declared_header_size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((declared_header_size >> (8 * i)) & 0xff));
  out << header_json << payload;
}

inline void WriteSafetensors(const std::filesystem::path& path,
                             const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header;
  std::string payload;
  BuildSafetensors(tensors, &header, &payload);
  const std::string text = header.dump();
  WriteRawSafetensors(path, text, payload, text.size());
}

inline void WriteJson(const std::filesystem::path& path, const nlohmann::json& json) {
  std::ofstream(path) << json.dump(2);
}

// A fresh, empty folder under the test temp dir, private to this process (CTest runs tests
// in parallel).
inline std::filesystem::path FreshDir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ridge_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace ridge::testing

#include <random>

namespace ridge::testing {

// A small MesaNet config.json in FLA's format.
inline nlohmann::json SmallMesaConfig(bool output_gate = false, bool tied = false) {
  return {{"model_type", "mesa_net"},
          {"architectures", {"MesaNetForCausalLM"}},
          {"hidden_size", 32},
          {"num_heads", 2},
          {"head_dim", 16},
          {"num_hidden_layers", 2},
          {"conv_size", 4},
          {"hidden_ratio", 4},
          {"intermediate_size", nullptr},
          {"vocab_size", 50},
          {"use_output_gate", output_gate},
          {"tie_word_embeddings", tied},
          {"norm_eps", 1e-6},
          {"lambda_lower_bound", 0.25}};
}

// Every tensor of spec section 1 for `config`, with random values, as F32.
inline std::map<std::string, RawTensor> RandomMesaTensors(const nlohmann::json& config,
                                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  const int64_t c = config["hidden_size"], h = config["num_heads"], d = config["head_dim"];
  const int64_t layers = config["num_hidden_layers"], w = config["conv_size"];
  const int64_t v = config["vocab_size"], k = h * d;
  const int64_t inter = (c * 4 * 2 / 3 + 255) / 256 * 256;
  std::map<std::string, RawTensor> t;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean = 0.0f) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    RawTensor tensor{"F32", shape, std::vector<float>(n), ""};
    for (float& x : tensor.values) x = mean + normal(rng);
    t[name] = tensor;
  };
  add("model.embeddings.weight", {v, c});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {c}, 1.0f);
    for (const char* proj : {"q_proj", "k_proj", "v_proj"})
      add(p + "attn." + proj + ".weight", {k, c});
    add(p + "attn.a_proj.weight", {h, c});
    add(p + "attn.a_proj.bias", {h}, 2.0f);
    add(p + "attn.b_proj.weight", {h, c});
    add(p + "attn.b_proj.bias", {h});
    add(p + "attn.lambda_params", {k});
    add(p + "attn.q_conv1d.weight", {k, 1, w});
    add(p + "attn.k_conv1d.weight", {k, 1, w});
    add(p + "attn.o_norm.weight", {d}, 1.0f);
    if (config.value("use_output_gate", false)) add(p + "attn.g_proj.weight", {k, c});
    add(p + "attn.o_proj.weight", {c, k});
    add(p + "mlp_norm.weight", {c}, 1.0f);
    add(p + "mlp.gate_proj.weight", {inter, c});
    add(p + "mlp.up_proj.weight", {inter, c});
    add(p + "mlp.down_proj.weight", {c, inter});
  }
  add("model.norm.weight", {c}, 1.0f);
  if (!config.value("tie_word_embeddings", false)) add("lm_head.weight", {v, c});
  return t;
}

inline std::filesystem::path WriteMesaCheckpoint(const std::string& name,
                                                 const nlohmann::json& config,
                                                 const std::map<std::string, RawTensor>& tensors) {
  const auto dir = FreshDir(name);
  WriteJson(dir / "config.json", config);
  WriteSafetensors(dir / "model.safetensors", tensors);
  return dir;
}

}  // namespace ridge::testing
