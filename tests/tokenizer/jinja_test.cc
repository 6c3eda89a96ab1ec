// The Jinja interpreter on its own: each construct against what Jinja2 3.1 renders in
// transformers' environment (expected strings produced with it), errors at load time with line and
// column, runtime errors, and the limits that keep a hostile template from hanging the server.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "tokenizer/jinja/template.h"

namespace ridge::jinja {
namespace {

Value Context() {
  return Value::FromJson(nlohmann::ordered_json::parse(R"({
    "m": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo", "x": 1}],
    "s": "  Hello, World  ", "d": {"b": 2, "a": 1}, "n": null, "f": 2.5,
    "u8": "h\u00e9llo\u4e16\u754c"})"));
}

absl::StatusOr<std::string> Render(const std::string& source, const RenderLimits& limits = {}) {
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(Context(), limits);
}

struct Case {
  const char* source;
  const char* expected;
};

// Rendered by Jinja2 3.1.6 with transformers 5's chat-template environment. One deliberate
// difference: Python's tuples (from .items() and |items) print as lists here.
const Case kCases[] = {
    {"{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ "
     "loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
     "10TrueFalse332;21FalseFalse321;32FalseTrue310;"},
    {"{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}",
     "2/2 4/2 "},
    {"{% for x in [] %}a{% else %}empty{% endfor %}", "empty"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", "b=2,a=1,"},
    {"{% for k in d %}{{ k }}{% endfor %}|{{ d.keys() | list }}|{{ d.values() | list }}",
     "ba|['b', 'a']|[2, 1]"},
    {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% "
     "endif %}{{ x }}{% endfor %}",
     "0134"},
    {"{% set ns = namespace(count=0, found=false) %}{% for x in m %}{% set ns.count = ns.count + 1 "
     "%}{% endfor %}{{ ns.count }}",
     "2"},
    {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", "1"},
    {"{% set a, b = [1, 2] %}{{ a }}{{ b }}", "12"},
    {"{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]", "[inner 2]"},
    {"{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') "
     "}} {{ greet('Al', punct='?') }}",
     "Hello Bob! Hello Al?"},
    {"{{ m | selectattr('role', 'equalto', 'user') | list | length }} {{ m | rejectattr('role', "
     "'eq', 'user') | map(attribute='content') | join(',') }}",
     "1 Yo"},
    {"{{ m | map(attribute='role') | join(', ') }}|{{ m | selectattr('x') | list | length }}|{{ m "
     "| selectattr('x', 'defined') | first }}",
     "user, assistant|1|{'role': 'assistant', 'content': 'Yo', 'x': 1}"},
    {"{{ s | trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}",
     "Hello, World|Hello, World|Hello, World  |  Hello, World|hi"},
    {"{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a,b,c'.rsplit(',', 1) }}{{ "
     "'a,b,c'.split(',', 1) }}",
     "['a', 'b', '', 'c']['a', 'b']['a,b', 'c']['a', 'b,c']"},
    {"{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('lo', 'x')) }}{{ 'abcabc'.replace('b', "
     "'X') }}{{ 'abcabc'.replace('b', 'X', 1) }}",
     "TrueTrueaXcaXcaXcabc"},
    {"{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'Hi' | upper }} {{ 'Hi' | lower }} "
     "{{ 'hi' | capitalize }}",
     "Hello World Hello HI hi Hi"},
    {"{{ [1,2,3,4,5][::-1] }}{{ [1,2,3,4,5][1:3] }}{{ [1,2,3,4,5][-2:] }}{{ [1,2,3,4,5][::2] }}{{ "
     "'hello'[1:-1] }}{{ u8[1:4] }}{{ u8[-1] }}",
     "[5, 4, 3, 2, 1][2, 3][4, 5][1, 3, 5]elléll界"},
    {"{{ u8 | length }} {{ m | length }} {{ d | length }} {{ undefined_thing | length }}",
     "7 2 2 0"},
    {"{{ d | tojson }}|{{ m | tojson }}|{{ d | tojson(indent=2) }}|{{ u8 | tojson }}|{{ f | tojson "
     "}}|{{ n | tojson }}|{{ 'a\"b\\\\c\nd' | tojson }}",
     "{\"b\": 2, \"a\": 1}|[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
     "\"content\": \"Yo\", \"x\": 1}]|{\n  \"b\": 2,\n  \"a\": "
     "1\n}|\"héllo世界\"|2.5|null|\"a\\\"b\\\\c\\nd\""},
    {"{{ {'b': [1, {'c': None}], 'a': true} | tojson(indent=4) }}",
     "{\n    \"b\": [\n        1,\n        {\n            \"c\": null\n        }\n    ],\n    "
     "\"a\": true\n}"},
    {"{{ d | tojson(sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}|{{ [] | "
     "tojson(indent=2) }}|{{ {} | tojson }}",
     "{\"a\": 1, \"b\": 2}|{\"b\":2,\"a\":1}|[]|{}"},
    {"{{ x | default('dflt') }}|{{ '' | default('e', true) }}|{{ '' | default('e') }}|{{ n | "
     "default('z') }}",
     "dflt|e||None"},
    {"{{ n is none }}{{ x is defined }}{{ s is string }}{{ d is mapping }}{{ m is iterable }}{{ m "
     "is sequence }}{{ f is number }}{{ true is true }}{{ 0 is false }}{{ 3 is odd }}{{ 'a' is in "
     "'cat' }}",
     "TrueFalseTrueTrueTrueTrueTrueTrueFalseTrueTrue"},
    {"{{ 1 if n else 2 }}{{ 'yes' if 'a' in 'abc' }}{{ 'x' not in ['y'] }}{{ 2 in [1, 2] }}{{ 'a' "
     "in d }}",
     "2yesTrueTrueTrue"},
    {"{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 "
     "}} {{ 1.5 + 1 }} {{ 'ab' ~ 1 ~ none }} {{ [1] + [2] }} {{ 'ab' * 2 }}",
     "7 3 -4 1 2 3.5 1024 2.5 ab1None [1, 2] abab"},
    {"{{ 1 == 1.0 }}{{ 1 < 2 }}{{ 'a' < 'b' }}{{ 2 >= 3 }}{{ not true }}{{ true and 'x' }}{{ false "
     "or 'y' }}{{ n is not none }}",
     "TrueTrueTrueFalseFalsexyFalse"},
    {"{{ 3.0 }} {{ 1e-7 }} {{ 1.5e20 }} {{ 0.1 + 0.2 }} {{ 100.0 / 3 }} {{ True }} {{ none }} {{ d "
     "}} {{ ['a', \"b'c\"] }}",
     "3.0 1e-07 1.5e+20 0.30000000000000004 33.333333333333336 True None {'b': 2, 'a': 1} ['a', "
     "\"b'c\"]"},
    {"{{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 5 | string ~ 'a' "
     "}} {{ d | items | list }}",
     "43 0 3 2.5 5a [['b', 2], ['a', 1]]"},
    {"{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 1] | unique | list }} "
     "{{ [1, 2] | reverse | list }} {{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ [1, 5, 2] | "
     "max }} {{ [1, 5, 2] | sum }}",
     "[1, 2, 3] [3, 2, 1] [1, 2] [2, 1] 1 3 5 8"},
    {"{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dd') }} {{ d['a'] }} {{ d.a }} {{ "
     "m[0].role }} {{ m[-1]['content'] }} {{ m.5 is defined }}",
     "1 None dd 1 1 user Yo False"},
    {"{%- if true -%}\n  A  \n{%- endif -%}\n  B\n{# comment #}\nC\n  {% if true %}\n  D\n  {% "
     "endif %}\nE",
     "AB\nC\n  D\nE"},
    {"{{ '%s' }} {{ 'a\\tb' }} {{ \"it's\" }} {{ 'x' 'y' }}", "%s a\tb it's xy"},
    {"{% filter upper %}shout {{ 'it' }}{% endfilter %}", "SHOUT IT"},
    {"{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside{% endcall %}",
     "[inside]"},
    {"{{ dict(a=1, b='x') | tojson }} {{ namespace(a=1).a }}", "{\"a\": 1, \"b\": \"x\"} 1"},
    {"{% for x in [1, 2] %}{{ loop.cycle('odd', 'even') }}{{ loop.previtem is defined }}{% endfor "
     "%}",
     "oddFalseevenTrue"},
    {"{{ 'abc'.find('c') }} {{ 'a-b'.count('-') }} {{ ', '.join(['x', 'y']) }} {{ "
     "'l1\\nl2'.splitlines() }}",
     "2 1 x, y ['l1', 'l2']"},
    {"{{ '  x  ' | trim('x ') }}|{{ 'Hello World' | replace('o', '0') }}|{{ 'abc' | list }}|{{ [1, "
     "[2]] | string }}",
     "|Hell0 W0rld|['a', 'b', 'c']|[1, [2]]"},
    {"{% if m[0].content is string and m[0].content.startswith('H') %}ok{% endif %}{% if m[5] is "
     "undefined %}u{% endif %}",
     "oku"},
};

TEST(JinjaTest, MatchesJinja2) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.source);
    absl::StatusOr<std::string> out = Render(c.source);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.expected);
  }
}

TEST(JinjaTest, UnsupportedConstructsFailAtLoadWithPosition) {
  const std::pair<const char*, const char*> kBad[] = {
      {"{% include 'x' %}", "line 1, column 4: unsupported statement '{% include %}'"},
      {"a\n  {{ x | frobnicate }}", "line 2, column 10: unsupported filter 'frobnicate'"},
      {"{% if x is prime %}{% endif %}", "line 1, column 12: unsupported test 'prime'"},
      {"{{ x.format(1) }}", "line 1, column 12: unsupported method 'format()'"},
      {"{{ launch() }}", "line 1, column 4: unknown function 'launch()'"},
      {"{% for x in y %}", "line 1, column 17: unexpected end of template"},
      {"{{ 'abc }}", "line 1, column 4: string literal is never closed"},
      {"{{ x + }}", "line 1, column 8: expected an expression, got '}}'"},
      {"{% break %}", "line 1, column 4: 'break' outside a loop"},
      {"{# never closed", "line 1, column 1: comment is never closed"},
      {"{{ x ? y }}", "line 1, column 6: unexpected character '?'"},
  };
  for (const auto& [source, message] : kBad) {
    SCOPED_TRACE(source);
    absl::StatusOr<Template> t = Template::Parse(source);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(t.status().message()).substr(0, std::string(message).size()), message)
        << t.status().message();
  }
}

TEST(JinjaTest, RuntimeErrorsNameTheProblem) {
  const std::pair<const char*, const char*> kBad[] = {
      {"{{ raise_exception('Roles must alternate') }}",
       "the template raised: Roles must alternate"},
      {"{{ nothing.attr }}", "line 1, column 11: 'nothing' is undefined (reading '.attr')"},
      {"{{ 1 + 'a' }}", "line 1, column 6: unsupported operand types for +: 'int' and 'str'"},
      {"{{ m + 1 }}", "line 1, column 6: unsupported operand types for +: 'list' and 'int'"},
      {"{{ 1 // 0 }}", "line 1, column 6: division by zero"},
      {"{{ s.bogus() }}", "line 1, column 11: unsupported method 'bogus()'"},
      {"{{ nothing() }}", "line 1, column 4: unknown function 'nothing()'"},
      {"{{ m[0].content.startswith(1) }}", "line 1, column 27: startswith() argument must be"},
      {"{% set x.y = 1 %}", "line 1, column 4: cannot assign attribute 'y' on 'x'"},
      {"{% for a, b in [1] %}{% endfor %}", "line 1, column 4: cannot unpack 1 into 2 names"},
      {"{{ n | tojson(indent='x') }}", "line 1, column 8: tojson: indent must be an integer"},
  };
  for (const auto& [source, message] : kBad) {
    SCOPED_TRACE(source);
    absl::StatusOr<std::string> out = Render(source);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(out.status().message()).substr(0, std::string(message).size()), message)
        << out.status().message();
  }
}

TEST(JinjaTest, LimitsStopRunawayTemplates) {
  RenderLimits limits;
  limits.max_loop_iterations = 1000;
  limits.max_output_bytes = 4096;
  limits.max_call_depth = 8;
  absl::StatusOr<std::string> loops =
      Render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", limits);
  EXPECT_NE(loops.status().message().find("more than 1000 loop iterations"), std::string::npos)
      << loops.status();
  absl::StatusOr<std::string> big =
      Render("{% for i in range(900) %}{{ 'abcdefgh' }}{% endfor %}", limits);
  EXPECT_NE(big.status().message().find("exceeds 4096 bytes"), std::string::npos) << big.status();
  absl::StatusOr<std::string> deep =
      Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", limits);
  EXPECT_NE(deep.status().message().find("more than 8 calls deep"), std::string::npos)
      << deep.status();
  absl::StatusOr<std::string> range = Render("{{ range(1000000000) | length }}");
  EXPECT_NE(range.status().message().find("range() is limited"), std::string::npos);
  // Deeply nested source is refused at load, not by exhausting the stack.
  std::string nested(5000, '(');
  EXPECT_FALSE(Template::Parse("{{ " + nested + "1" + std::string(5000, ')') + " }}").ok());
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_FALSE(Template::Parse(blocks).ok());
}

TEST(JinjaTest, WhitespaceControlAsTransformers) {
  // trim_blocks and lstrip_blocks on; "+" turns lstrip off; one trailing newline dropped.
  EXPECT_EQ(*Render("  {% if true %}\nx\n  {% endif %}\n"), "x\n");
  EXPECT_EQ(*Render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(*Render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(*Render("a\r\nb\n\n"), "a\nb\n");
  EXPECT_EQ(*Render("{{ {'k': {'j': 1}} }}"), "{'k': {'j': 1}}");
}

// Corrupted real templates (bytes replaced, inserted, deleted; deterministic) must parse or fail
// cleanly, and render or fail cleanly within the limits: never crash or hang. Run under
// ASan/UBSan by scripts/sanitizer_tests.sh.
TEST(JinjaTest, CorruptedTemplatesFailCleanly) {
  const std::filesystem::path dir = std::filesystem::path(RIDGE_TEST_DATA_DIR) / "chat_templates";
  const Value context = Value::FromJson(nlohmann::ordered_json::parse(R"({
      "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                   {"role": "assistant", "content": "<think>r</think>a",
                    "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
                   {"role": "tool", "content": "t"}],
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})"));
  RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_loop_iterations = 10000;
  std::mt19937 rng(30);
  const std::string alphabet = "{}%#-+()[]|.,:'\"~ \nabcdefgnotinisif";
  int parsed = 0, rendered = 0;
  for (const char* file :
       {"qwen3.jinja", "llama3.1.jinja", "mistral-nemo.jinja", "smollm3.jinja"}) {
    std::ifstream in(dir / file);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string source = ss.str();
    ASSERT_FALSE(source.empty()) << file;
    for (int round = 0; round < 300; ++round) {
      std::string mutated = source;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const size_t at = rng() % mutated.size();
        const char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0:
            mutated[at] = c;
            break;
          case 1:
            mutated.insert(mutated.begin() + static_cast<std::ptrdiff_t>(at), c);
            break;
          default:
            mutated.erase(at, 1 + rng() % 8);
            break;
        }
      }
      absl::StatusOr<Template> t = Template::Parse(mutated);
      if (!t.ok()) {
        EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
        continue;
      }
      ++parsed;
      absl::StatusOr<std::string> out = t->Render(context, limits);
      if (out.ok()) ++rendered;
    }
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(rendered, 50);
}

}  // namespace
}  // namespace ridge::jinja
