// ridgeserve: an inference server and toolkit for MesaNet models.
#include <cstdio>
#include <cstring>
#include <string>

#include "base/build_info.h"
#include "kernels/threading.h"
#include "server/commands.h"

namespace {

constexpr char kUsage[] = R"(usage: ridgeserve COMMAND [flags]

commands:
  serve      serve a model over HTTP (OpenAI-compatible API, /metrics, /health, /ready)
  generate   sample a continuation of a prompt given as token ids
  score      write the logits of every position of a token sequence (teacher forcing)
  info       describe a checkpoint (--model DIR) and the GPUs this machine has

Run `ridgeserve COMMAND --help` for a command's flags; `ridgeserve --version` says what this
binary is.
)";

}  // namespace

int main(int argc, char** argv) {
  ridge::ReexecWithPassiveOpenMpWait(argv);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version" || command == "version") {
    const ridge::BuildInfo& build = ridge::GetBuildInfo();
    std::printf("ridgeserve %s (revision %s, %s build, %s, CUDA %s)\n", build.version.c_str(),
                build.revision.c_str(), build.build_type.c_str(), build.compiler.c_str(),
                build.cuda ? "yes" : "no");
    return 0;
  }
  if (command == "serve") return ridge::RunServeCommand(argc - 2, argv + 2);
  if (command == "generate") return ridge::RunGenerateCommand(argc - 2, argv + 2);
  if (command == "score") return ridge::RunScoreCommand(argc - 2, argv + 2);
  if (command == "info") return ridge::RunInfoCommand(argc - 2, argv + 2);
  std::fprintf(stderr, "ridgeserve: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
