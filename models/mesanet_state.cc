#include "models/mesanet_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ridge {
namespace {

constexpr char kMagic[8] = {'R', 'G', 'M', 'E', 'S', 'A', '0', '1'};

struct SnapshotHeader {
  char magic[8];
  int64_t num_layers, num_heads, head_dim, conv_size, tokens, num_floats;
};

}  // namespace

MesaState::MesaState(const MesaNetConfig& config)
    : num_layers_(config.num_hidden_layers),
      num_heads_(config.num_heads),
      head_dim_(config.head_dim),
      conv_size_(config.conv_size),
      matrix_floats_(config.num_heads * config.head_dim * config.head_dim),
      tail_floats_((config.conv_size - 1) * config.key_dim()),
      layer_stride_(2 * matrix_floats_ + 2 * tail_floats_),
      data_(num_layers_ * layer_stride_, 0.0f) {}

void MesaState::Reset() {
  std::fill(data_.begin(), data_.end(), 0.0f);
  tokens_ = 0;
}

std::string MesaState::Serialize() const {
  SnapshotHeader header;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.num_layers = num_layers_;
  header.num_heads = num_heads_;
  header.head_dim = head_dim_;
  header.conv_size = conv_size_;
  header.tokens = tokens_;
  header.num_floats = static_cast<int64_t>(data_.size());
  std::string out(sizeof(header) + data_.size() * sizeof(float), '\0');
  std::memcpy(out.data(), &header, sizeof(header));
  std::memcpy(out.data() + sizeof(header), data_.data(), data_.size() * sizeof(float));
  return out;
}

absl::StatusOr<MesaState> MesaState::Deserialize(const MesaNetConfig& config,
                                                 std::string_view bytes) {
  SnapshotHeader header;
  if (bytes.size() < sizeof(header)) {
    return absl::InvalidArgumentError("state snapshot is shorter than its header");
  }
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("not a MesaNet state snapshot (bad magic)");
  }
  MesaState state(config);
  if (header.num_layers != state.num_layers_ || header.num_heads != state.num_heads_ ||
      header.head_dim != state.head_dim_ || header.conv_size != state.conv_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("state snapshot is for layers=", header.num_layers,
                     " heads=", header.num_heads, " head_dim=", header.head_dim,
                     " conv_size=", header.conv_size, ", which does not match the loaded model"));
  }
  const size_t payload = state.data_.size() * sizeof(float);
  if (header.num_floats != static_cast<int64_t>(state.data_.size()) ||
      bytes.size() != sizeof(header) + payload) {
    return absl::InvalidArgumentError("state snapshot has the wrong size (truncated?)");
  }
  if (header.tokens < 0) return absl::InvalidArgumentError("state snapshot has a negative length");
  std::memcpy(state.data_.data(), bytes.data() + sizeof(header), payload);
  state.tokens_ = header.tokens;
  return state;
}

}  // namespace ridge
