#include "engine/tokenizer/chat_template.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> RenderText(const std::string& source, const nlohmann::json& messages,
                                       bool add_generation_prompt = true) {
  auto t = ChatTemplate::Compile(source, "<s>", "</s>");
  if (!t.ok()) return t.status();
  ChatTemplateInputs in;
  in.messages = &messages;
  in.add_generation_prompt = add_generation_prompt;
  return t->Render(in);
}

const nlohmann::json kChat = nlohmann::json::parse(
    R"([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])");

TEST(ChatTemplateTest, OutputsAndLiterals) {
  EXPECT_EQ(*RenderText("a{{ 1 + 2 }}b{{ 'x' ~ \"y\" }}{{ none }}{{ true }}", kChat), "a3bxyNoneTrue");
  EXPECT_EQ(*RenderText("{{ [1, 2.0, 'a'] }}{{ {'k': none} }}", kChat), "[1, 2.0, 'a']{'k': None}");
}

TEST(ChatTemplateTest, TrimAndLstripBlocks) {
  EXPECT_EQ(*RenderText("  {% if true %}\nx\n  {% endif %}\ny", kChat), "x\ny");
  EXPECT_EQ(*RenderText("a  {{- ' b ' -}}  c", kChat), "a b c");
  EXPECT_EQ(*RenderText("x\n", kChat), "x");  // keep_trailing_newline off
}

TEST(ChatTemplateTest, LoopsAndNamespace) {
  EXPECT_EQ(*RenderText("{% for m in messages %}{{ loop.index }}{{ m.role }}{% if not loop.last %},"
                        "{% endif %}{% endfor %}", kChat),
            "1system,2user");
  EXPECT_EQ(*RenderText("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                        "{% endfor %}{{ ns.n }}", kChat),
            "2");
  EXPECT_EQ(*RenderText("{% for x in [] %}a{% else %}empty{% endfor %}", kChat), "empty");
}

TEST(ChatTemplateTest, UndefinedSemantics) {
  EXPECT_EQ(*RenderText("[{{ nope }}][{{ messages[0].nope }}][{{ nope is defined }}]", kChat),
            "[][][False]");
  auto r = RenderText("{{ nope.attr }}", kChat);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("'nope' is undefined"));
  EXPECT_THAT(r.status().message(), HasSubstr("line 1"));
}

// Integers follow Python's floor division, modulo and powers; where Python's unbounded result
// would not fit 64 bits the render fails naming the operator (never a wrapped value: these
// were undefined behaviour, found by the fuzzer).
TEST(ChatTemplateTest, IntegerArithmeticIsPythonsOrAnOverflowError) {
  EXPECT_EQ(*RenderText("{{ 7 // -2 }} {{ 7 % -2 }} {{ -7 // 2 }} {{ 5 // -1 }} {{ 5 % -1 }}", kChat),
            "-4 -1 -4 -5 0");
  EXPECT_EQ(*RenderText("{{ 2 ** 62 }} {{ (-1) ** 65 }} {{ 0 ** 0 }} {{ 3 ** 3 }} {{ -(-5) }}", kChat),
            "4611686018427387904 -1 1 27 5");
  EXPECT_EQ(*RenderText("{{ range(2, 9223372036854775807, 9223372036854775807) | list }}"
                        "{{ [1, 2, 3][1::9223372036854775807] }}{{ [1, 2, 3][::-9223372036854775807] }}",
                        kChat),
            "[2][2][3]");
  const char* kMin = "(-9223372036854775807 - 1)";
  const std::pair<std::string, std::string> overflows[] = {
      {"{{ 9223372036854775807 + 1 }}", "'+'"},
      {std::string("{{ ") + kMin + " - 1 }}", "'-'"},
      {"{{ 4611686018427387904 * 2 }}", "'*'"},
      {"{{ 2 ** 63 }}", "'**'"},
      {"{{ 3 ** 40 }}", "'**'"},
      {std::string("{{ ") + kMin + " // -1 }}", "'//'"},
      {std::string("{{ -") + kMin + " }}", "'-'"},
      {std::string("{{ ") + kMin + " | abs }}", "'abs'"},
  };
  for (const auto& [source, op] : overflows) {
    auto r = RenderText(source, kChat);
    ASSERT_FALSE(r.ok()) << source << " gave " << *r;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << source;
    EXPECT_THAT(r.status().message(), HasSubstr("integer overflow in " + op)) << source;
  }
}

TEST(ChatTemplateTest, RaiseExceptionGivesTheMessage) {
  auto r = RenderText("{{ raise_exception('Roles must alternate') }}", kChat);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "Roles must alternate");
}

TEST(ChatTemplateTest, UnsupportedConstructsFailAtCompileNamingLine) {
  struct Case { const char* source; const char* expected; };
  for (const Case& c : {Case{"a\n{{ x|nosuchfilter }}", "line 2: unsupported filter 'nosuchfilter'"},
                        Case{"\n\n{% if x is weird %}{% endif %}", "line 3: unsupported test 'weird'"},
                        Case{"{{ x.frobnicate() }}", "line 1: unsupported method 'frobnicate'"},
                        Case{"{% include 'x' %}", "line 1: unsupported construct 'include'"},
                        Case{"{{ mystery(1) }}", "line 1: unsupported function 'mystery'"},
                        Case{"{% if x %}", "missing '{% endif %}'"},
                        Case{"{{ 'abc }}", "unterminated string literal"},
                        Case{"{% break %}", "'break' outside a loop"}}) {
    auto t = ChatTemplate::Compile(c.source, "", "");
    ASSERT_FALSE(t.ok()) << c.source;
    EXPECT_THAT(t.status().message(), HasSubstr(c.expected)) << c.source;
  }
}

TEST(ChatTemplateTest, MacrosWithDefaults) {
  EXPECT_EQ(*RenderText("{% macro f(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(1, b=2) }}", kChat),
            "1-d 1-2");
}

TEST(ChatTemplateTest, ToJsonMatchesTransformers) {
  nlohmann::json m = nlohmann::json::parse(R"([{"b": "é\n", "a": [1, 2.5, null, true]}])");
  // nlohmann::json objects keep keys sorted, so the input order is already lost here (Python
  // would print "b" first); tojson itself keeps the order it is given.
  EXPECT_EQ(*RenderText("{{ messages[0]|tojson }}", m), R"({"a": [1, 2.5, null, true], "b": "é\n"})");
  EXPECT_EQ(*RenderText("{{ {'z': 1, 'a': 2}|tojson }} {{ {'z': 1, 'a': 2}|tojson(sort_keys=true) }}", m),
            R"({"z": 1, "a": 2} {"a": 2, "z": 1})");
}

TEST(ChatTemplateTest, StrftimeNowIsFixedByTheEnvironment) {
  setenv("MLASERVE_CHAT_TEMPLATE_NOW", "0", 1);
  EXPECT_EQ(*RenderText("{{ strftime_now('%Y-%m-%d') }}", kChat), "1970-01-01");
  unsetenv("MLASERVE_CHAT_TEMPLATE_NOW");
}

TEST(ChatTemplateTest, LoadsTheEmbeddedModelTemplate) {
  const char* src = std::getenv("MLASERVE_SOURCE_DIR");
  auto t = ChatTemplate::Load(std::string(src ? src : ".") + "/models/mlaserve-tiny-moe");
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateInputs in;
  in.messages = &kChat;
  EXPECT_EQ(*t->Render(in), "<｜begin▁of▁sentence｜>sys\n\nUser: hi\n\nAssistant:");
  EXPECT_EQ(ChatTemplate::Load("/nonexistent").status().code(), absl::StatusCode::kNotFound);
}

// A --chat_template that opens but cannot be read (a folder) fails the load naming it; it used
// to load as an empty template that rendered every chat as "".
TEST(ChatTemplateTest, UnreadableOverrideFailsNamingIt) {
  const char* src = std::getenv("MLASERVE_SOURCE_DIR");
  const std::string model = std::string(src ? src : ".") + "/models/mlaserve-tiny-moe";
  const absl::Status status = ChatTemplate::Load(model, model).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), testing::HasSubstr(model + ": read failed"));
}

}  // namespace
}  // namespace mlaserve
