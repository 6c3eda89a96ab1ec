// A small Jinja2 interpreter for the subset Hugging Face chat templates use, rendering the way
// transformers does (trim_blocks, lstrip_blocks, loop controls, its tojson, strftime_now,
// raise_exception). Parse() checks everything it can: a template that parses uses only supported
// statements, filters, tests, functions and methods. Render() is bounded by RenderLimits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tokenizer/jinja/value.h"

namespace ridge::jinja {

struct RenderLimits {
  size_t max_output_bytes = 16u << 20;
  int max_call_depth = 64;                  // nested macro calls
  int64_t max_loop_iterations = 1'000'000;  // over the whole rendering
};

class Template {
 public:
  // InvalidArgument "line L, column C: ..." for a syntax error or an unsupported construct.
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with `context` (a dict) as the global variables. Errors are InvalidArgument:
  // "line L, column C: ..." for type errors and undefined values; a raise_exception() call is
  // "the template raised: <message>" with no position (it is the template's own message).
  absl::StatusOr<std::string> Render(const Value& context,
                                     const RenderLimits& limits = RenderLimits()) const;

 private:
  struct Program;
  std::shared_ptr<const Program> program_;
};

}  // namespace ridge::jinja
