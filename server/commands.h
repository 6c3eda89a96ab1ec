// The subcommands of the ridgeserve binary. Each returns the process exit code.
#pragma once

namespace ridge {

int RunScoreCommand(int argc, char** argv);
int RunGenerateCommand(int argc, char** argv);
int RunInfoCommand(int argc, char** argv);
int RunServeCommand(int argc, char** argv);

}  // namespace ridge
