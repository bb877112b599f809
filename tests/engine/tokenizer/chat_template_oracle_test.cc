// Compares the chat-template interpreter byte for byte with Python's jinja2 in transformers'
// environment (tools/tokenizer/render_chat_template.py), rendering the real templates of
// DeepSeek-V3, Llama 3.1 and Qwen2.5 (fetched by tools/tokenizer/fetch.sh), the embedded model's
// template and construct templates over the conversations in tests/data/chat/. The expectations
// are produced by Python at test time. Skips when the npm files or python3-jinja2 are absent.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

namespace fs = std::filesystem;

fs::path SourceDir() {
  const char* s = std::getenv("MLASERVE_SOURCE_DIR");
  return s != nullptr ? fs::path(s) : fs::path(".");
}

nlohmann::json ReadJson(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in, nullptr, false);
}

std::string TokenText(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const auto& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content")) return t["content"].get<std::string>();
  return "";
}

// Templates of single constructs, rendered over every conversation too.
const char* const kConstructTemplates[] = {
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ m.role|upper }}"
    "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}|{% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index0 }}{{ m['role'][0] }}"
    "{% else %}none{% endfor %}",
    "{%- set ns = namespace(n=0, sys='') -%}\n{%- for m in messages -%}\n"
    "  {%- if m.role == 'system' %}{% set ns.sys = m.content %}{% endif -%}\n"
    "  {%- set ns.n = ns.n + 1 -%}\n{%- endfor -%}\n[{{ ns.n }}][{{ ns.sys }}]",
    "{% for m in messages %}\n  {% if m.content is string %}\n    <{{ m.content|trim }}>\n"
    "  {% elif m.content is none %}\n    NONE\n  {% else %}\n    {{ m.content|tojson }}\n"
    "  {% endif %}\n{% endfor %}\n",
    "{{ messages|tojson }}|{{ messages[0]|tojson(indent=2) }}|{{ tools|tojson }}",
    "{{ messages|length }} {{ messages[-1].content[1:] }} {{ messages[0].content[::-1] }}"
    " {{ (messages|last).role }} {{ messages|map(attribute='role')|join(',') }}",
    "{% for m in messages %}{{ m.content.strip().split()|join('_') if m.content is string }}"
    "{{ m.content.startswith('H') if m.content is string }};{% endfor %}",
    "{% macro fmt(m, sep=': ') %}{{ m.role ~ sep ~ m.content }}{% endmacro %}"
    "{% for m in messages %}{{ fmt(m) }}\n{{ fmt(m, sep='=') }}\n{% endfor %}",
    "{% for m in messages %}{% if m.tool_calls is defined %}{% for c in m.tool_calls %}"
    "{{ c.function.name }}({% for k, v in c.function.arguments.items() %}{{ k }}={{ v }},"
    "{% endfor %}){% endfor %}{% endif %}{% endfor %}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1.5 + 1 }} {{ 1e20 }}"
    " {{ 0.1 + 0.2 }} {{ 'a' ~ 1 ~ none }} {{ [1, 'x', none, true] }} {{ {'k': [1.0]} }}"
    " {{ 3 in [1, 2, 3] }} {{ 'x' not in 'abc' }} {{ 'a\\tb\\u00e9' }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"
    "{{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|unique|list }}",
    "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{{ m.role }}"
    "{% endfor %}{% for i in range(5) %}{% if i is odd %}{% continue %}{% endif %}{{ i }}{% endfor "
    "%}",
    "{% if add_generation_prompt %}gen{% endif %}{{ bos_token }}{{ eos_token }}"
    "{{ undefined_var }}{{ undefined_var is defined }}{{ undefined_var|default('dflt') }}",
    "  {% for m in messages %}\n    {{- m.role }}\n  {%+ if true %}x{% endif +%}\n{% endfor %}\n\n",
    "{{ messages[0].get('content', 'no') }} {{ messages[0].get('missing', 'no') }}"
    " {{ messages[0].keys()|list }} {{ 'Hello World'.replace('o', '0').lower().title() }}",
    "{% set x %}block {{ messages|length }}{% endset %}{{ x|upper }}{# a comment #}\n{{ x }}",
    "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be user') }}"
    "{% endif %}ok",
    "{{ strftime_now('%Y-%m-%d %H:%M') }} {{ messages[0].content|indent(2, true) }}",
};

TEST(ChatTemplateOracleTest, MatchesPythonJinja2) {
  const fs::path src = SourceDir();
  const fs::path models = src / ".cache" / "tokenizer" / "models";
  if (!fs::exists(models / "deepseek_v3" / "tokenizer_config.json")) {
    GTEST_SKIP() << "no tokenizer files; run tools/tokenizer/fetch.sh";
  }
  if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3-jinja2 is not installed";
  }
  setenv("MLASERVE_CHAT_TEMPLATE_NOW", "1764028800", 1);
  nlohmann::json conversations = ReadJson(src / "tests" / "data" / "chat" / "conversations.json");
  ASSERT_TRUE(conversations.is_array());

  struct Source {
    std::string name, text, bos, eos;
  };
  std::vector<Source> sources;
  for (const fs::path& dir : {models / "deepseek_v3", models / "llama3_1", models / "qwen2_5",
                              src / "models" / "mlaserve-tiny-moe"}) {
    nlohmann::json config = ReadJson(dir / "tokenizer_config.json");
    if (!config.contains("chat_template")) continue;
    sources.push_back({dir.filename().string(), config["chat_template"].get<std::string>(),
                       TokenText(config, "bos_token"), TokenText(config, "eos_token")});
  }
  int k = 0;
  for (const char* t : kConstructTemplates)
    sources.push_back({"construct" + std::to_string(k++), t, "<s>", "</s>"});

  nlohmann::json cases = nlohmann::json::array();
  std::vector<std::string> labels;
  for (const auto& s : sources) {
    for (const auto& c : conversations) {
      for (bool gen : {true, false}) {
        nlohmann::json one = {
            {"template", s.text},
            {"bos_token", s.bos},
            {"eos_token", s.eos},
            {"messages", c["messages"]},
            {"add_generation_prompt", c.value("add_generation_prompt", true) && gen}};
        if (c.contains("tools")) one["tools"] = c["tools"];
        cases.push_back(one);
        labels.push_back(s.name + " × " + c["name"].get<std::string>() + (gen ? "" : " (no gen)"));
      }
    }
  }
  const fs::path dir = fs::temp_directory_path() / ("chat_oracle_" + std::to_string(getpid()));
  fs::create_directories(dir);
  { std::ofstream(dir / "cases.json") << cases.dump(); }
  const std::string cmd = "python3 " + (src / "tools/tokenizer/render_chat_template.py").string() +
                          " " + (dir / "cases.json").string() + " > " + (dir / "out.json").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  nlohmann::json expected = ReadJson(dir / "out.json");
  fs::remove_all(dir);
  ASSERT_EQ(expected.size(), cases.size());

  int matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    auto t =
        ChatTemplate::Compile(c["template"].get<std::string>(), c["bos_token"], c["eos_token"]);
    ASSERT_TRUE(t.ok()) << labels[i] << ": " << t.status();
    ChatTemplateInputs in;
    in.messages = &c["messages"];
    if (c.contains("tools")) in.tools = &c["tools"];
    in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    auto got = t->Render(in);
    if (expected[i].contains("ok")) {
      EXPECT_TRUE(got.ok()) << labels[i] << ": " << got.status();
      if (got.ok()) {
        EXPECT_EQ(*got, expected[i]["ok"].get<std::string>()) << labels[i];
        matched += *got == expected[i]["ok"].get<std::string>();
      }
    } else {
      EXPECT_FALSE(got.ok()) << labels[i] << ": python failed with " << expected[i]["error"];
      if (!got.ok()) ++matched;
    }
  }
  std::printf("chat template oracle: %d/%zu cases match (%zu templates x %zu conversations x 2)\n",
              matched, cases.size(), sources.size(), conversations.size());
}

}  // namespace
}  // namespace mlaserve
