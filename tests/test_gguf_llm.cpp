// A llama.cpp LLM GGUF as the text encoder: its config against the folder's config.json, the q/k
// un-permutation, every tensor against the folder's, the text encoder's hidden states against the golden data,
// the tokenizer rebuilt from tokenizer.ggml.* against the folder's tokenizer, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "gguf_builder.h"
#include "golden.h"
#include "io/configs.h"
#include "io/gguf.h"
#include "io/gguf_llm.h"
#include "io/gguf_tokenizer.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "models/mistral.h"
#include "text/tokenizer.h"

namespace ernie {
namespace {

using nlohmann::json;
using test::error_of;
using test::expect_error;
using test::golden_ids;
using test::golden_tensor;

std::string te_gguf() { return test::data_dir() + "/gguf/text_encoder-F16.gguf"; }
std::shared_ptr<GgufFile> te_file() {
  static std::shared_ptr<GgufFile> f = GgufFile::open(te_gguf());
  return f;
}
const json& golden_doc() {
  static const json j = read_json_file(test::golden_json());
  return j;
}
MistralConfig folder_config() {
  const std::string p = test::tiny_model() + "/text_encoder/config.json";
  return parse_mistral_config(read_json_file(p), p);
}
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- a GGUF rewritten with edits (for the error cases) ------------------------------------------------------

struct GgufEdit {
  std::set<std::string> drop;                     // metadata keys left out
  std::map<std::string, std::string> set_string;  // metadata keys (re)written as strings
  std::map<std::string, uint32_t> set_u32;        // ... as u32
  std::map<std::string, float> set_f32;           // ... as f32
  std::map<std::string, std::string> rename;      // tensor names
  std::pair<std::string, std::string> rekey;      // metadata keys starting with .first get .second instead
};

std::string rewrite_gguf(const std::string& path, const GgufEdit& e) {
  const std::string src = slurp(path);
  const GgufHeader h = parse_gguf(src.data(), src.size(), path);
  test::GgufBytes o;
  o.b += "GGUF";
  o.u32(3);
  o.u64(h.tensors.size());
  size_t nkv = 0;
  std::map<std::string, std::pair<uint32_t, std::string>> kv;  // key -> (type, value bytes as written)
  for (const auto& [k, v] : h.metadata) {
    if (e.drop.count(k)) continue;
    std::string bytes;
    test::GgufBytes b;
    if (v.type == GgufType::STRING) b.str(std::string(v.bytes));
    else if (v.type == GgufType::ARRAY) b.u32(uint32_t(v.elem)), b.u64(v.count), b.b += std::string(v.bytes);
    else b.b += std::string(v.bytes);
    const std::string key =
        !e.rekey.first.empty() && k.rfind(e.rekey.first, 0) == 0 ? e.rekey.second + k.substr(e.rekey.first.size()) : k;
    kv[key] = {uint32_t(v.type), b.b};
  }
  for (const auto& [k, s] : e.set_string) {
    test::GgufBytes b;
    b.str(s);
    kv[k] = {uint32_t(GgufType::STRING), b.b};
  }
  for (const auto& [k, u] : e.set_u32) {
    test::GgufBytes b;
    b.u32(u);
    kv[k] = {uint32_t(GgufType::U32), b.b};
  }
  for (const auto& [k, x] : e.set_f32) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    test::GgufBytes b;
    b.u32(u);
    kv[k] = {uint32_t(GgufType::F32), b.b};
  }
  nkv = kv.size();
  o.u64(nkv);
  for (const auto& [k, tv] : kv) {
    o.str(k);
    o.u32(tv.first);
    o.b += tv.second;
  }
  for (const TensorInfo& t : h.tensors) {
    auto r = e.rename.find(t.name);
    o.str(r == e.rename.end() ? t.name : r->second);
    o.u32(uint32_t(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) o.u64(uint64_t(*it));  // ggml order
    o.u32(uint32_t(t.ggml_type));
    o.u64(t.begin);
  }
  while (o.b.size() % h.alignment) o.b.push_back('\0');
  o.b += src.substr(h.data_offset);
  return o.b;
}

struct EditedGguf {
  test::TempDir dir;
  std::shared_ptr<GgufFile> file;
  explicit EditedGguf(const GgufEdit& e, const std::string& from = te_gguf()) {
    const std::string p = dir.str() + "/edited.gguf";
    std::ofstream(p, std::ios::binary) << rewrite_gguf(from, e);
    file = GgufFile::open(p);
  }
};

// ---- config ----------------------------------------------------------------------------------------------

TEST(GgufLlm, ConfigEqualsTheFolderConfigFieldByField) {
  const MistralConfig g = gguf_mistral_config(*te_file());
  const MistralConfig f = folder_config();
  EXPECT_EQ(gguf_llm_arch(*te_file()), "llama");
  EXPECT_EQ(g.hidden_size, f.hidden_size);
  EXPECT_EQ(g.num_hidden_layers, f.num_hidden_layers);
  EXPECT_EQ(g.intermediate_size, f.intermediate_size);
  EXPECT_EQ(g.num_attention_heads, f.num_attention_heads);
  EXPECT_EQ(g.num_key_value_heads, f.num_key_value_heads);
  EXPECT_EQ(g.head_dim, f.head_dim);
  EXPECT_EQ(g.vocab_size, f.vocab_size);
  EXPECT_EQ(g.rms_norm_eps, f.rms_norm_eps);
  EXPECT_EQ(g.tie_word_embeddings, f.tie_word_embeddings);
  EXPECT_EQ(g.bos_token_id, f.bos_token_id);
  EXPECT_EQ(g.eos_token_id, f.eos_token_id);
  EXPECT_EQ(g.pad_token_id, f.pad_token_id);
  EXPECT_EQ(g.rope_type, f.rope_type);
  EXPECT_EQ(g.rope_theta, f.rope_theta);
  EXPECT_EQ(g.factor, f.factor);
  EXPECT_EQ(g.original_max_position_embeddings, f.original_max_position_embeddings);
  EXPECT_EQ(g.beta_fast, f.beta_fast);
  EXPECT_EQ(g.beta_slow, f.beta_slow);
  EXPECT_EQ(g.mscale, f.mscale);
  EXPECT_EQ(g.mscale_all_dim, f.mscale_all_dim);
  EXPECT_EQ(g.attention_factor, f.attention_factor);
  EXPECT_EQ(g.rope_truncate, f.rope_truncate);
  EXPECT_EQ(g.llama_4_scaling_beta, f.llama_4_scaling_beta);
  EXPECT_EQ(g.max_position_embeddings, f.max_position_embeddings);
}

TEST(GgufLlm, Mistral3ReadsLogMultiplierAndTemperatureScale) {
  // The keys are under "<arch>.": a renamed architecture finds none of llama.*.
  EditedGguf renamed({.set_string = {{"general.architecture", "mistral3"}}});
  expect_error([&] { gguf_mistral_config(*renamed.file); }, "'mistral3.embedding_length' is missing");
  // As llama.cpp's converter writes Ministral-3: yarn_log_multiplier = mscale_all_dim, temperature_scale =
  // llama_4_scaling_beta.
  EditedGguf m3({.set_string = {{"general.architecture", "mistral3"}},
                 .set_f32 = {{"mistral3.rope.scaling.yarn_log_multiplier", 1.f},
                             {"mistral3.attention.temperature_scale", 0.1f}},
                 .rekey = {"llama.", "mistral3."}});
  EXPECT_EQ(gguf_llm_arch(*m3.file), "mistral3");
  const MistralConfig c = gguf_mistral_config(*m3.file);
  const MistralConfig f = folder_config();
  EXPECT_EQ(c.llama_4_scaling_beta, double(0.1f));
  EXPECT_EQ(c.mscale, 1.0);
  EXPECT_EQ(c.mscale_all_dim, 1.0);
  EXPECT_EQ(c.hidden_size, f.hidden_size);
  EXPECT_EQ(c.factor, f.factor);
  EXPECT_EQ(c.original_max_position_embeddings, f.original_max_position_embeddings);
  EditedGguf m0({.set_string = {{"general.architecture", "mistral3"}},
                 .set_f32 = {{"mistral3.rope.scaling.yarn_log_multiplier", 0.f}},
                 .rekey = {"llama.", "mistral3."}});
  const MistralConfig c0 = gguf_mistral_config(*m0.file);
  EXPECT_EQ(c0.mscale_all_dim, 0.0);
  EXPECT_EQ(c0.llama_4_scaling_beta, 0.0);
  // No scaling at all: plain RoPE.
  EditedGguf plain({.drop = {"llama.rope.scaling.type", "llama.rope.scaling.factor"}});
  EXPECT_EQ(gguf_mistral_config(*plain.file).rope_type, "default");
}

TEST(GgufLlm, MissingHyperParameterIsNamed) {
  for (const char* key : {"llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
                          "llama.attention.head_count", "llama.attention.layer_norm_rms_epsilon",
                          "llama.rope.scaling.factor"}) {
    EditedGguf e({.drop = {key}});
    expect_error([&] { gguf_mistral_config(*e.file); }, std::string("'") + key + "' is missing");
  }
  // Optional ones take llama.cpp's defaults.
  EditedGguf kv({.drop = {"llama.attention.head_count_kv"}});
  EXPECT_EQ(gguf_mistral_config(*kv.file).num_key_value_heads, 4);
}

TEST(GgufLlm, UnsupportedHyperParametersAreRefused) {
  EditedGguf lin({.set_string = {{"llama.rope.scaling.type", "linear"}}});
  expect_error([&] { gguf_mistral_config(*lin.file); }, "rope.scaling.type 'linear' is not supported");
  EditedGguf rot({.set_u32 = {{"llama.rope.dimension_count", 8}}});
  expect_error([&] { gguf_mistral_config(*rot.file); }, "partial rotary");
  EditedGguf heads({.set_u32 = {{"llama.attention.head_count_kv", 3}}});
  expect_error([&] { gguf_mistral_config(*heads.file); }, "not a multiple of num_key_value_heads");
  EditedGguf nan({.set_f32 = {{"llama.attention.layer_norm_rms_epsilon", std::nanf("")}}});
  expect_error([&] { gguf_mistral_config(*nan.file); }, "'llama.attention.layer_norm_rms_epsilon' is not a finite number");
  EditedGguf inf({.set_f32 = {{"llama.rope.scaling.factor", HUGE_VALF}}});
  expect_error([&] { gguf_mistral_config(*inf.file); }, "'llama.rope.scaling.factor' is not a finite number");
  EditedGguf qwen({.set_string = {{"general.architecture", "qwen2"}}});
  expect_error([&] { gguf_mistral_config(*qwen.file); }, "'qwen2' is not supported");
}

TEST(GgufLlm, DiffusionModelGgufWhereAnLlmIsExpectedSaysSo) {
  for (const char* v : {"BF16", "Q8_0", "Q4_K", "Q5_1"}) {
    auto f = GgufFile::open(test::data_dir() + "/gguf/dit-" + std::string(v) + ".gguf");
    expect_error([&] { gguf_mistral_config(*f); }, "diffusion model (DiT)");
    expect_error([&] { tokenizer_from_gguf(*f); }, "tokenizer.ggml.model");
  }
}

// ---- q/k permutation ----------------------------------------------------------------------------------------

TEST(GgufLlm, UnpermuteInvertsTheConverterPermutation) {
  // One head of 4 rows: the converter stores HF rows [0, 2, 1, 3] (reshape(1, 2, 2, in).swapaxes(1, 2)).
  Tensor w = Tensor::from_vector({0, 0, 1, 1, 2, 2, 3, 3}, {4, 2});
  EXPECT_EQ(gguf_permute_qk(w, 1).to_vector(), (std::vector<float>{0, 0, 2, 2, 1, 1, 3, 3}));
  EXPECT_EQ(gguf_unpermute_qk(gguf_permute_qk(w, 1), 1).to_vector(), w.to_vector());
  // Two heads of 6: rows h*6 + [0, 3, 1, 4, 2, 5].
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[size_t(i)] = float(i);
  std::vector<float> want = {0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11};
  EXPECT_EQ(gguf_permute_qk(Tensor::from_vector(v, {12, 1}), 2).to_vector(), want);
  EXPECT_EQ(gguf_unpermute_qk(Tensor::from_vector(want, {12, 1}), 2).to_vector(), v);
  // Random, in BF16 too (the copy is by rows, any dtype).
  Tensor r = test::rnd({48, 7}, 5).cast(DType::BF16);
  for (int heads : {1, 2, 4, 8, 12}) {
    EXPECT_EQ(gguf_unpermute_qk(gguf_permute_qk(r, heads), heads).to_vector(), r.to_vector()) << heads;
    EXPECT_EQ(gguf_unpermute_qk(r, heads).dtype(), DType::BF16);
  }
  EXPECT_NE(gguf_unpermute_qk(r, 4).to_vector(), r.to_vector());
  expect_error([&] { gguf_unpermute_qk(r, 5); }, "is not [n_head * even head_dim, in]");
  expect_error([&] { gguf_unpermute_qk(test::rnd({12, 2}, 1), 4); }, "is not [n_head * even head_dim, in]");
}

// ---- the adapter --------------------------------------------------------------------------------------------

TEST(GgufLlm, AdapterTensorsEqualTheFolderTensorsExactly) {
  const MistralConfig c = gguf_mistral_config(*te_file());
  std::shared_ptr<TensorFile> a = gguf_llm_as_hf(te_file(), c);
  EXPECT_STREQ(a->format(), "gguf");
  EXPECT_EQ(a->path(), te_gguf());
  EXPECT_EQ(a->tensors().size(), size_t(3 + 9 * c.num_hidden_layers));
  auto folder = SafeTensorsFile::open(test::tiny_model() + "/text_encoder/model.safetensors");
  size_t compared = 0;
  for (const TensorInfo& ti : folder->tensors()) {
    const std::string pre = "language_model.";
    if (ti.name.rfind(pre, 0) != 0) continue;  // the vision tower and projector are not in an LLM GGUF
    const std::string hf = ti.name.substr(pre.size());
    const TensorInfo* gi = a->find(hf);
    ASSERT_NE(gi, nullptr) << hf;
    EXPECT_EQ(gi->shape, ti.shape) << hf;
    EXPECT_EQ(gi->file, te_gguf());
    EXPECT_EQ(gi->end - gi->begin, size_t(shape_numel(gi->shape)) * dtype_size(gi->dtype)) << hf;
    Tensor t = a->tensor(hf);
    EXPECT_EQ(t.shape(), ti.shape) << hf;
    EXPECT_EQ(t.to_vector(), folder->tensor(ti.name).to_vector()) << hf;
    ++compared;
  }
  EXPECT_EQ(compared, size_t(2 + 9 * c.num_hidden_layers));
  // The stored q rows are the permuted ones: read raw they differ from the folder's.
  EXPECT_NE(te_file()->tensor("blk.0.attn_q.weight").to_vector(),
            folder->tensor("language_model.model.layers.0.self_attn.q_proj.weight").to_vector());
  ASSERT_NE(a->find("lm_head.weight"), nullptr);
  EXPECT_EQ(a->tensor("lm_head.weight").shape(), (Shape{c.vocab_size, c.hidden_size}));
  expect_error([&] { a->tensor("model.layers.9.mlp.up_proj.weight"); }, "no tensor 'model.layers.9.mlp.up_proj.weight'");
}

TEST(GgufLlm, AdapterRefusesUnknownAndMissingTensors) {
  const MistralConfig c = gguf_mistral_config(*te_file());
  EditedGguf extra({.rename = {{"blk.2.ffn_down.weight", "blk.2.ffn_down_exps.weight"}}});
  expect_error([&] { gguf_llm_as_hf(extra.file, c); }, "tensor 'blk.2.ffn_down.weight' is missing");
  MistralConfig two = c;
  two.num_hidden_layers = 2;
  expect_error([&] { gguf_llm_as_hf(te_file(), two); }, "tensor 'blk.2.attn_norm.weight' is not part of a 2-layer");
  MistralConfig wide = c;
  wide.num_attention_heads = 8;
  expect_error([&] { gguf_llm_as_hf(te_file(), wide); }, "expected 96 rows");
}

// ---- the text encoder run from the GGUF --------------------------------------------------------------------

TEST(GgufLlm, TextEncoderFromGgufMatchesGoldenHiddenStates) {
  const MistralConfig c = gguf_mistral_config(*te_file());
  Component comp = gguf_llm_component(te_file(), c, "text_encoder", false);
  EXPECT_EQ(comp.prefix, "model.");
  MistralModel lm = MistralModel::load(comp, c, kCPU, DType::F32, c.num_hidden_layers - 1);
  Tokenizer tok = tokenizer_from_gguf(*te_file());
  const json& prompts = golden_doc()["prompts"];
  ASSERT_EQ(prompts.size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int64_t> ids = tok.encode(prompts[i].get<std::string>());
    Tensor h = lm.forward(ids, lm.num_layers());
    auto r = test::tensors_close(h, golden_tensor("te." + std::to_string(i) + ".hidden"), test::kCpuRelL2);
    std::cout << "[ closeness ] gguf te." << i << ".hidden: " << r.message() << std::endl;
    EXPECT_TRUE(r) << i;
  }
  // The golden data tells the attention factor: llama.cpp's reading of YaRN without yarn_log_multiplier
  // (1 + 0.1 ln factor, i.e. mscale = mscale_all_dim = 0 here) must not pass where 1 does.
  MistralConfig llama_cpp = c;
  llama_cpp.mscale = llama_cpp.mscale_all_dim = 0;
  MistralModel other = MistralModel::load(comp, llama_cpp, kCPU, DType::F32, c.num_hidden_layers - 1);
  EXPECT_FALSE(test::tensors_close(other.forward(tok.encode("a cat"), other.num_layers()), golden_tensor("te.0.hidden"),
                                   test::kCpuRelL2));
}

// ---- the tokenizer --------------------------------------------------------------------------------------------

TEST(GgufTokenizer, MatchesReferenceIdsForEveryGoldenCase) {
  Tokenizer tok = tokenizer_from_gguf(*te_file());
  const json& cases = golden_doc()["tokenizer_cases"];
  ASSERT_GE(cases.size(), 10u);
  for (size_t n = 0; n < cases.size(); ++n)
    EXPECT_EQ(tok.encode(cases[n].get<std::string>()), golden_ids("tok." + std::to_string(n) + ".ids")) << n;
  EXPECT_EQ(tok.model_max_length(), kGgufTokenizerMaxLength);
}

TEST(GgufTokenizer, RebuiltJsonEqualsTheFolderTokenizerJson) {
  auto [tj, cfg] = gguf_tokenizer_json(te_file()->metadata(), te_gguf());
  const json folder = read_json_file(test::tiny_model() + "/tokenizer/tokenizer.json");
  for (const char* k : {"added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder"})
    EXPECT_EQ(tj[k], folder[k]) << k;
  EXPECT_EQ(tj["model"], folder["model"]);
  EXPECT_EQ(cfg["bos_token"], "<s>");
  EXPECT_EQ(cfg["eos_token"], "</s>");
  EXPECT_EQ(cfg["unk_token"], "<unk>");
  EXPECT_FALSE(cfg.contains("pad_token"));  // the fixture has no tokenizer.ggml.padding_token_id
}

TEST(GgufTokenizer, EncodeAndDecodeEqualTheFolderTokenizer) {
  Tokenizer g = tokenizer_from_gguf(*te_file());
  Tokenizer f = Tokenizer::load(test::tiny_model() + "/tokenizer");
  for (const std::string s : {"a cat", "[INST]hello[/INST]", "<s>x</s>", "<unk><pad>[IMG]", "  tabs\tand\nlines ",
                              "中华田园犬 🐱 café", "[TOOL_CALLS] {\"a\": 1}", ""}) {
    for (bool special : {true, false}) {
      const auto ids = g.encode(s, special);
      EXPECT_EQ(ids, f.encode(s, special)) << s;
      for (bool skip : {false, true}) EXPECT_EQ(g.decode(ids, skip), f.decode(ids, skip)) << s;
    }
  }
  EXPECT_EQ(g.decode(g.encode("a cat", false)), "a cat");
}

TEST(GgufTokenizer, UnknownModelOrPreTokenizerIsAnError) {
  EditedGguf llama({.set_string = {{"tokenizer.ggml.model", "llama"}}});
  expect_error([&] { tokenizer_from_gguf(*llama.file); }, "tokenizer.ggml.model 'llama' is not supported");
  EditedGguf pre({.set_string = {{"tokenizer.ggml.pre", "llama-bpe"}}});
  expect_error([&] { tokenizer_from_gguf(*pre.file); }, "tokenizer.ggml.pre 'llama-bpe' is not supported");
  EditedGguf nopre({.drop = {"tokenizer.ggml.pre"}});
  expect_error([&] { tokenizer_from_gguf(*nopre.file); }, "tokenizer.ggml.pre '' is not supported");
  EditedGguf notok({.drop = {"tokenizer.ggml.tokens"}});
  expect_error([&] { tokenizer_from_gguf(*notok.file); }, "'tokenizer.ggml.tokens' is missing");
  EditedGguf bos({.set_u32 = {{"tokenizer.ggml.bos_token_id", 871}}});
  expect_error([&] { tokenizer_from_gguf(*bos.file); }, "bos_token_id 871 is not a token id");
  EditedGguf nomerges({.drop = {"tokenizer.ggml.merges"}});
  const std::string zh = golden_doc()["tokenizer_cases"][4].get<std::string>();
  EXPECT_NE(tokenizer_from_gguf(*nomerges.file).encode(zh), golden_ids("tok.4.ids"));
  EditedGguf merge({.set_string = {{"tokenizer.ggml.merges", "x"}}});
  expect_error([&] { tokenizer_from_gguf(*merge.file); }, "tokenizer.ggml.merges");
}

}  // namespace
}  // namespace ernie
