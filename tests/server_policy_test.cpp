// The server's pure logic: request parsing and validation, the batching policy, base64.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/batching.h"
#include "server/request_parse.h"
#include "server/server.h"

namespace ernie::server {
namespace {

ApiError parse_error(const std::string& body) {
  try {
    parse_generation_request(body);
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

TEST(ServerParse, FullRequest) {
  ParsedRequest p = parse_generation_request(
      R"({"prompt":"a cat","negative_prompt":"dog","n":2,"size":"48x32","steps":7,"guidance_scale":2.5,
          "seed":99,"use_pe":true,"response_format":"b64_json","model":"x","user":"u"})");
  EXPECT_EQ(p.req.prompt, "a cat");
  EXPECT_EQ(p.req.negative_prompt, "dog");
  EXPECT_EQ(p.req.num_images, 2);
  EXPECT_EQ(p.req.width, 48);
  EXPECT_EQ(p.req.height, 32);
  EXPECT_EQ(p.req.steps, 7);
  EXPECT_FLOAT_EQ(p.req.cfg, 2.5f);
  EXPECT_EQ(p.req.seed, 99u);
  EXPECT_TRUE(p.seed_given);
  EXPECT_TRUE(p.req.use_pe);
  EXPECT_FALSE(p.url);
}

TEST(ServerParse, ResponseFormatUrl) {
  EXPECT_TRUE(parse_generation_request(R"({"prompt":"a cat","response_format":"url"})").url);
  EXPECT_FALSE(parse_generation_request(R"({"prompt":"a cat"})").url);  // b64_json stays the default
  EXPECT_FALSE(parse_generation_request(R"({"prompt":"a cat","response_format":null})").url);
}

TEST(ServerParse, DefaultsLeftToThePipeline) {
  ParsedRequest p = parse_generation_request(R"({"prompt":"a cat","size":"auto","seed":null})");
  EXPECT_EQ(p.req.width, 0);
  EXPECT_EQ(p.req.height, 0);
  EXPECT_EQ(p.req.steps, 0);
  EXPECT_EQ(p.req.cfg, -1.0f);
  EXPECT_FALSE(p.seed_given);
  // -1 is random, as in the CLI (the server then picks the seed).
  EXPECT_FALSE(parse_generation_request(R"({"prompt":"a cat","seed":-1})").seed_given);
  EXPECT_EQ(parse_generation_request(R"({"prompt":"a cat","seed":18446744073709551615})").req.seed, UINT64_MAX);
}

TEST(ServerParse, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"prompt":"x","size":"12"})", "size"},       {R"({"prompt":"x","size":"0x8"})", "size"},
      {R"({"prompt":"x","size":"9999999x8"})", "size"}, {R"({"prompt":"x","size":"8x-8"})", "size"},
      {R"({"prompt":"x","steps":-1})", "steps"},        {R"({"prompt":"x","steps":2.5})", "steps"},
      {R"({"prompt":"x","steps":"2"})", "steps"},       {R"({"prompt":"x","n":0})", "n"},
      {R"({"prompt":"x","n":9})", "n"},                  {R"({"prompt":"x","seed":-2})", "seed"},
      {R"({"prompt":"x","seed":1e300})", "seed"},       {R"({"prompt":"x","guidance_scale":-0.5})", "guidance_scale"},
      {R"({"prompt":"x","use_pe":1})", "use_pe"},       {R"({"prompt":"x","response_format":"jpeg"})", "response_format"},
      {R"({"prompt":"x","stepz":3})", "stepz"},         {R"({"negative_prompt":"x"})", "prompt"},
      {R"({"prompt":" "})", "prompt"},                   {R"({"prompt":["x"]})", "prompt"},
  };
  for (const Case& c : cases) {
    ApiError e = parse_error(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(ServerParse, BadDocuments) {
  for (std::string body : {std::string(""), std::string("{"), std::string("[]"), std::string("null"),
                           std::string(100, '[') + std::string(100, ']'), std::string("{\"prompt\":\"\xff\"}")}) {
    ApiError e = parse_error(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "invalid_json") << body.substr(0, 20) << ": " << e.message;
  }
  // Brackets inside strings do not count as nesting.
  EXPECT_NO_THROW(parse_generation_request(R"({"prompt":")" + std::string(100, '[') + "\"}"));
}

TEST(ServerParse, ErrorShape) {
  nlohmann::json j = ApiError{429, "full", "rate_limit_error", "", "queue_full"}.to_json();
  EXPECT_EQ(j["error"]["message"], "full");
  EXPECT_EQ(j["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "queue_full");
}

TEST(ServerBase64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> v[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                   {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                   {"foobar", "Zm9vYmFy"}};
  for (auto [in, out] : v) EXPECT_EQ(base64_encode(in), out);
  EXPECT_EQ(base64_encode(std::string("\xff\x00\xfe", 3)), "/wD+");
}

BatchKey key(int w, int steps = 4) { return {w, w, steps, 4.0f, false}; }

TEST(ServerBatching, NeverWithoutABatchingPipeline) {
  CostModel cost;
  cost.record(key(32), 1, 1.0);
  cost.record(key(32), 2, 1.0);
  std::vector<Waiting> q = {{key(32), 1}, {key(32), 1}};
  EXPECT_EQ(choose_batch(q, cost, {1, 0.05}), std::vector<size_t>{0});
}

TEST(ServerBatching, NothingToCompareWithRunsAlone) {
  CostModel cost;
  std::vector<Waiting> q = {{key(32), 1}, {key(32), 1}};
  EXPECT_EQ(choose_batch(q, cost, {8, 0.05}), std::vector<size_t>{0});
}

TEST(ServerBatching, TriesAnUnmeasuredSizeOnce) {
  CostModel cost;
  cost.record(key(32), 1, 1.0);
  std::vector<Waiting> q = {{key(32), 1}, {key(64), 1}, {key(32), 1}, {key(32), 1}};
  EXPECT_EQ(choose_batch(q, cost, {8, 0.05}), (std::vector<size_t>{0, 2}));  // one step beyond what is known
}

TEST(ServerBatching, BatchesOnlyWhenNoSlowerThanTheHeadAlone) {
  CostModel cost;
  cost.record(key(32), 1, 1.0);
  cost.record(key(32), 2, 1.03);  // within the 5% tolerance
  cost.record(key(32), 3, 1.5);   // slower: the head and the jumped-over request would wait longer
  std::vector<Waiting> q = {{key(32), 1}, {key(64), 1}, {key(32), 1}, {key(32), 1}};
  EXPECT_EQ(choose_batch(q, cost, {8, 0.05}), (std::vector<size_t>{0, 2}));
  cost.record(key(32), 2, 2.0);
  cost.record(key(32), 2, 2.0);
  cost.record(key(32), 2, 2.0);  // the average now says 2 is slower too
  EXPECT_EQ(choose_batch(q, cost, {8, 0.05}), std::vector<size_t>{0});
}

TEST(ServerBatching, RespectsTheImageLimitAndCompatibility) {
  CostModel cost;
  for (int n = 1; n <= 8; ++n) cost.record(key(32), n, 1.0);
  std::vector<Waiting> q = {{key(32), 2}, {key(32, 8), 1}, {key(32), 3}, {key(32), 2}, {key(32), 1}};
  EXPECT_EQ(choose_batch(q, cost, {6, 0.05}), (std::vector<size_t>{0, 2}));  // 2 + 3; + 2 would be 7 > 6
  EXPECT_EQ(choose_batch(q, cost, {8, 0.05}), (std::vector<size_t>{0, 2, 3, 4}));
}

}  // namespace
}  // namespace ernie::server
