// Random corruption of a real checkpoint: every mutated file must load or fail with an error,
// never crash or read out of bounds (run under AddressSanitizer to check the latter).
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "models/mesanet_model.h"
#include "tests/unit/test_checkpoint_writer.h"

namespace ridge {
namespace {

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(CheckpointCorruptionTest, MutatedFilesNeverCrash) {
  const auto config = testing::SmallMesaConfig();
  const auto dir =
      testing::WriteMesaCheckpoint("corrupt", config, testing::RandomMesaTensors(config, 9));
  const std::string original = ReadAll(dir / "model.safetensors");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | uint8_t(original[i]);

  std::mt19937_64 rng(2024);
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string mutated = original;
    switch (trial % 4) {
      case 0:  // truncate anywhere
        mutated.resize(rng() % original.size());
        break;
      case 1:  // flip bytes inside the JSON header
        for (int i = 0; i < 3; ++i) mutated[8 + rng() % header_size] ^= char(1 + rng() % 255);
        break;
      case 2:  // overwrite the length field
        for (int i = 0; i < 8; ++i) mutated[i] = char(rng());
        break;
      case 3:  // replace a digit of the header (offsets and shapes)
        for (int tries = 0; tries < 100; ++tries) {
          const size_t at = 8 + rng() % header_size;
          if (std::isdigit(uint8_t(mutated[at]))) {
            mutated[at] = char('0' + rng() % 10);
            break;
          }
        }
        break;
    }
    std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::trunc) << mutated;
    auto model = MesaNetModel::Load(dir);
    model.ok() ? ++loaded : ++rejected;
    if (!model.ok()) EXPECT_FALSE(model.status().message().empty());
  }
  EXPECT_GT(rejected, 150);  // most corruptions are caught
  std::printf("loaded %d, rejected %d\n", loaded, rejected);
}

}  // namespace
}  // namespace ridge
