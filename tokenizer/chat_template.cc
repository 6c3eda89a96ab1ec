#include "tokenizer/chat_template.h"

#include <cstdint>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"

namespace ridge {
namespace {

// ChatML, as written by many Hugging Face checkpoints (canonical form, see
// CanonicalTemplateSource).
constexpr std::string_view kChatMl =
    "{%formessageinmessages%}{{'<|im_start|>'+message['role']+'\\n'+message['content']+"
    "'<|im_end|>'+'\\n'}}{%endfor%}{%ifadd_generation_prompt%}{{'<|im_start|>assistant\\n'}}"
    "{%endif%}";

// ChatML with a built-in system prompt when the conversation has none (Qwen1.5 / Qwen2
// instruct). The prompt text sits between kQwenHead and kQwenTail.
constexpr std::string_view kQwenHead =
    "{%formessageinmessages%}{%ifloop.firstandmessages[0]['role']!='system'%}"
    "{{'<|im_start|>system\\n";
constexpr std::string_view kQwenTail =
    "<|im_end|>\\n'}}{%endif%}{{'<|im_start|>'+message['role']+'\\n'+message['content']+"
    "'<|im_end|>'+'\\n'}}{%endfor%}{%ifadd_generation_prompt%}{{'<|im_start|>assistant\\n'}}"
    "{%endif%}";

// Turns the escapes a Jinja string literal may contain into the characters they stand for.
std::optional<std::string> UnescapeLiteral(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\'' || s[i] == '{' || s[i] == '}') return std::nullopt;
    if (s[i] != '\\') {
      out.push_back(s[i]);
      continue;
    }
    if (++i == s.size()) return std::nullopt;
    switch (s[i]) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      default:
        return std::nullopt;
    }
  }
  return out;
}

bool MatchChatMl(const std::string& canonical, ChatTemplateParams*) { return canonical == kChatMl; }

bool MatchChatMlWithSystem(const std::string& canonical, ChatTemplateParams* params) {
  if (canonical.size() <= kQwenHead.size() + kQwenTail.size() ||
      canonical.compare(0, kQwenHead.size(), kQwenHead) != 0 ||
      canonical.compare(canonical.size() - kQwenTail.size(), kQwenTail.size(), kQwenTail) != 0) {
    return false;
  }
  // Canonicalisation removed the spaces outside literals only, so the prompt is intact.
  std::optional<std::string> prompt = UnescapeLiteral(std::string_view(canonical).substr(
      kQwenHead.size(), canonical.size() - kQwenHead.size() - kQwenTail.size()));
  if (!prompt) return false;
  params->default_system_prompt = *std::move(prompt);
  return true;
}

void AppendChatMlTurn(std::string_view role, std::string_view content, std::string* out) {
  // (std::string_view is not absl::string_view in Debian's abseil, so no StrAppend here.)
  out->append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
}

std::string RenderChatMl(const ChatTemplateParams& params, std::span<const ChatMessage> messages,
                         bool add_generation_prompt) {
  std::string out;
  // The built-in system turn comes with the first message, so an empty conversation has none.
  if (!params.default_system_prompt.empty() && !messages.empty() && messages[0].role != "system") {
    AppendChatMlTurn("system", params.default_system_prompt, &out);
  }
  for (const ChatMessage& m : messages) AppendChatMlTurn(m.role, m.content, &out);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

struct KnownFormat {
  std::string_view name;
  bool (*matches)(const std::string& canonical_source, ChatTemplateParams* params);
  std::string (*render)(const ChatTemplateParams& params, std::span<const ChatMessage> messages,
                        bool add_generation_prompt);
};

constexpr KnownFormat kFormats[] = {
    {"chatml", MatchChatMl, RenderChatMl},
    {"chatml-with-default-system", MatchChatMlWithSystem, RenderChatMl},
};

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

std::string Excerpt(std::string_view source) {
  std::string out;
  for (char c : source.substr(0, 60)) out.push_back(c == '\n' ? ' ' : c);
  return source.size() > 60 ? out + "..." : out;
}

}  // namespace

std::string CanonicalTemplateSource(std::string_view source) {
  // transformers renders with trim_blocks and lstrip_blocks, so layout around block tags never
  // reaches the output; whitespace inside tags is only syntax. Text outside tags is kept.
  std::string out;
  out.reserve(source.size());
  size_t raw_begin = 0;  // where the text since the last tag starts in `out`
  const size_t n = source.size();
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t i = 0;
  while (i < n) {
    const bool tag = source[i] == '{' && i + 1 < n &&
                     (source[i + 1] == '{' || source[i + 1] == '%' || source[i + 1] == '#');
    if (!tag) {
      out.push_back(source[i++]);
      continue;
    }
    const char kind = source[i + 1];
    i += 2;
    if (i < n && (source[i] == '-' || source[i] == '+')) {
      if (source[i] == '-') {
        while (out.size() > raw_begin && is_space(out.back())) out.pop_back();
      }
      ++i;
    } else if (kind != '{') {
      // lstrip_blocks: spaces and tabs between a line start and a block tag are dropped.
      size_t k = out.size();
      while (k > raw_begin && (out[k - 1] == ' ' || out[k - 1] == '\t')) --k;
      if (k == raw_begin || out[k - 1] == '\n') out.resize(k);
    }
    const char close = kind == '{' ? '}' : kind;
    if (kind == '#') {
      // Comments produce nothing; only their whitespace control matters.
      const size_t end = source.find("#}", i);
      const size_t stop = end == std::string_view::npos ? n : end;
      const bool dash = stop > i && source[stop - 1] == '-';
      i = end == std::string_view::npos ? n : end + 2;
      if (dash) {
        while (i < n && is_space(source[i])) ++i;
      } else if (i < n && source[i] == '\n') {
        ++i;
      }
      raw_begin = out.size();
      continue;
    }
    out.push_back('{');
    out.push_back(kind);
    char quote = 0;
    bool dash_right = false;
    while (i < n) {
      const char c = source[i];
      if (quote != 0) {
        if (c == '\\' && i + 1 < n) {
          out.push_back(c);
          out.push_back(source[i + 1]);
          i += 2;
          continue;
        }
        if (c == quote) {
          out.push_back('\'');
          quote = 0;
        } else {
          if (c == '\'') out.push_back('\\');  // a ' inside a "..." literal
          out.push_back(c);
        }
        ++i;
        continue;
      }
      if ((c == '-' || c == '+') && i + 2 < n + 1 && i + 1 < n && source[i + 1] == close &&
          i + 2 < n && source[i + 2] == '}') {
        dash_right = c == '-';
        ++i;
        continue;
      }
      if (c == close && i + 1 < n && source[i + 1] == '}') {
        i += 2;
        break;
      }
      if (c == '\'' || c == '"') {
        quote = c;
        out.push_back('\'');
      } else if (!is_space(c)) {
        out.push_back(c);
      }
      ++i;
    }
    out.push_back(close);
    out.push_back('}');
    if (dash_right) {
      while (i < n && is_space(source[i])) ++i;
    } else if (kind == '%' && i < n && source[i] == '\n') {
      ++i;  // trim_blocks: the newline after a block tag is dropped
    }
    raw_begin = out.size();
  }
  return out;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromSource(std::string_view name,
                                                      std::string_view source) {
  const std::string canonical = CanonicalTemplateSource(source);
  ChatTemplate t;
  t.name_ = std::string(name);
  for (size_t i = 0; i < std::size(kFormats); ++i) {
    ChatTemplateParams params;
    if (kFormats[i].matches(canonical, &params)) {
      t.format_index_ = static_cast<int>(i);
      t.params_ = std::move(params);
      return t;
    }
  }
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(Fnv1a(source)));
  std::string known;
  for (const KnownFormat& f : kFormats) known.append(known.empty() ? "" : ", ").append(f.name);
  return absl::UnimplementedError(absl::StrCat(
      "chat template '", t.name_, "' (", source.size(), " bytes, fnv1a ", hash, ", begins \"",
      Excerpt(source), "\") is not a format ridgeserve can render; known formats: ", known));
}

std::string_view ChatTemplate::format() const { return kFormats[format_index_].name; }

absl::StatusOr<std::string> ChatTemplate::Apply(std::span<const ChatMessage> messages,
                                                bool add_generation_prompt) const {
  return kFormats[format_index_].render(params_, messages, add_generation_prompt);
}

absl::StatusOr<ChatTemplate> LoadChatTemplate(const TokenizerConfig& config,
                                              std::string_view name) {
  for (const NamedChatTemplate& t : config.chat_templates) {
    if (t.name == name) return ChatTemplate::FromSource(t.name, t.source);
  }
  return absl::NotFoundError(
      absl::StrCat("tokenizer_config.json has no chat template named '", std::string(name), "'"));
}

absl::StatusOr<std::string> ApplyChatTemplate(const ChatTemplate& chat_template,
                                              std::span<const ChatMessage> messages,
                                              bool add_generation_prompt) {
  return chat_template.Apply(messages, add_generation_prompt);
}

}  // namespace ridge
