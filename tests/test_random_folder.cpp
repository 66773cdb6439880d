// The random-weights model folder (models/random_folder.h), scaled down: it opens and checks clean, doctor
// is happy, its configs read back as written, its weights follow the models' random() rules, and the bytes
// do not depend on the number of writer threads. Also the parallel streamed writer's errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "cli.h"
#include "core/error.h"
#include "core/json.h"
#include "golden.h"
#include "doctor/doctor.h"
#include "convert/convert.h"
#include "io/safetensors_spec.h"
#include "models/random_folder.h"
#include "models/random_weights.h"

namespace fs = std::filesystem;
using namespace ernie;
using ernie::test::TempDir;

namespace {
// The tiny fixture's shapes.
RandomFolderOptions small_options() {
  RandomFolderOptions o;
  o.dit.hidden_size = 64, o.dit.num_attention_heads = 2, o.dit.num_layers = 3, o.dit.ffn_hidden_size = 160;
  o.dit.in_channels = o.dit.out_channels = 32, o.dit.text_in_dim = 48, o.dit.rope_axes_dim = {8, 12, 12};
  MistralConfig& t = o.text_encoder;
  t.hidden_size = 48, t.num_hidden_layers = 3, t.intermediate_size = 96, t.num_attention_heads = 4;
  t.num_key_value_heads = 2, t.head_dim = 12, t.vocab_size = 871;
  o.vae.block_out_channels = {32, 64}, o.vae.latent_channels = 8, o.vae.layers_per_block = 1, o.vae.norm_num_groups = 8;
  o.template_dir = test::tiny_model();
  o.shard_bytes = 64 << 10;  // several shards per component, as the release
  o.threads = 3;
  return o;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void expect_same_mistral(const MistralConfig& a, const MistralConfig& b) {
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.pad_token_id, b.pad_token_id);
  EXPECT_EQ(a.rope_type, b.rope_type);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.factor, b.factor);
  EXPECT_EQ(a.original_max_position_embeddings, b.original_max_position_embeddings);
  EXPECT_EQ(a.beta_fast, b.beta_fast);
  EXPECT_EQ(a.beta_slow, b.beta_slow);
  EXPECT_EQ(a.mscale, b.mscale);
  EXPECT_EQ(a.mscale_all_dim, b.mscale_all_dim);
  EXPECT_EQ(a.attention_factor, b.attention_factor);
  EXPECT_EQ(a.llama_4_scaling_beta, b.llama_4_scaling_beta);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
}
}  // namespace

TEST(RandomFolder, FullSizeConfigsReadBack) {
  const DitConfig d = parse_dit_config(nlohmann::json::parse(dit_config_json(DitConfig{})), "dit");
  const DitConfig e{};
  EXPECT_EQ(d.hidden_size, e.hidden_size);
  EXPECT_EQ(d.num_layers, e.num_layers);
  EXPECT_EQ(d.num_attention_heads, e.num_attention_heads);
  EXPECT_EQ(d.ffn_hidden_size, e.ffn_hidden_size);
  EXPECT_EQ(d.in_channels, e.in_channels);
  EXPECT_EQ(d.text_in_dim, e.text_in_dim);
  EXPECT_EQ(d.rope_axes_dim, e.rope_axes_dim);
  EXPECT_EQ(d.rope_theta, e.rope_theta);
  EXPECT_EQ(d.eps, e.eps);
  expect_same_mistral(parse_mistral_config(nlohmann::json::parse(text_encoder_config_json(MistralConfig{})), "te"),
                      MistralConfig{});
  expect_same_mistral(parse_mistral_config(nlohmann::json::parse(pe_config_json(full_size_pe_config())), "pe"),
                      full_size_pe_config());
  const VaeConfig v = parse_vae_config(nlohmann::json::parse(vae_config_json(VaeConfig{})), "vae"), w{};
  EXPECT_EQ(v.block_out_channels, w.block_out_channels);
  EXPECT_EQ(v.latent_channels, w.latent_channels);
  EXPECT_EQ(v.layers_per_block, w.layers_per_block);
  EXPECT_EQ(v.norm_num_groups, w.norm_num_groups);
  EXPECT_EQ(v.patch_size, w.patch_size);
  EXPECT_EQ(v.batch_norm_eps, w.batch_norm_eps);
  EXPECT_EQ(v.use_quant_conv, w.use_quant_conv);
}

TEST(RandomFolder, OpensChecksCleanAndDoctorIsHappy) {
  for (bool with_pe : {false, true}) {
    TempDir d;
    RandomFolderOptions o = small_options();
    if (with_pe) {
      o.pe = o.text_encoder;
      o.pe->tie_word_embeddings = true, o.pe->pad_token_id = 11, o.pe->llama_4_scaling_beta = 0.1;
    }
    const std::string dir = d.str() + "/model";
    const RandomFolderStats st = write_random_folder(dir, o);
    EXPECT_GT(st.files, 4u);  // sharded
    // Shards named as the release names them, each listed by the index.
    for (const char* stem : {"transformer/diffusion_pytorch_model", "text_encoder/model"}) {
      const nlohmann::json idx = read_json_file(dir + "/" + stem + ".safetensors.index.json");
      std::set<std::string> files;
      for (const auto& [name, file] : idx["weight_map"].items()) files.insert(file.get<std::string>());
      EXPECT_GT(files.size(), 2u) << stem;
      const std::string n = std::to_string(files.size());
      EXPECT_EQ(*files.begin(), fs::path(stem).filename().string() + "-00001-of-" + std::string(5 - n.size(), '0') + n +
                                    ".safetensors");
      for (const std::string& f : files) EXPECT_TRUE(fs::exists((fs::path(dir) / stem).parent_path() / f)) << f;
    }
    EXPECT_EQ(fs::exists(dir + "/pe"), with_pe);

    ModelFolder m = ModelFolder::open(dir);
    EXPECT_TRUE(m.check().empty()) << test::fatal_problems(m);  // not even a warning
    EXPECT_EQ(m.dit.num_layers, 3);
    EXPECT_EQ(m.text_encoder.vocab_size, 871);
    EXPECT_EQ(m.scheduler.shift, 4.f);
    EXPECT_EQ(m.pe_c.has_value(), with_pe);
    EXPECT_EQ(m.read_file("tokenizer/tokenizer.json"), ModelFolder::open(test::tiny_model()).read_file("tokenizer/tokenizer.json"));
    size_t bytes = 0;
    for (const Component* c : {&m.transformer_c, &m.text_encoder_c, &m.vae_c}) bytes += c->ckpt.bytes_on_disk();
    if (m.pe_c) bytes += m.pe_c->ckpt.bytes_on_disk();
    EXPECT_GT(bytes, st.bytes);  // the data plus headers
    EXPECT_EQ(m.transformer_c.dominant_dtype(), "BF16");

    // The values of the models' random() rules, by name.
    for (const char* n : {"layers.1.mlp.up_proj.weight", "layers.2.adaLN_sa_ln.weight", "x_embedder.proj.weight"}) {
      const Tensor t = m.transformer_c.tensor(n);
      EXPECT_EQ(t.to_vector(), random_weights::dit_tensor(n, t.shape(), o.seed).to_vector()) << n;
    }
    const Tensor emb = m.text_encoder_c.tensor("embed_tokens.weight");
    EXPECT_EQ(emb.to_vector(), random_weights::mistral_tensor("embed_tokens.weight", emb.shape(), o.seed).to_vector());
    EXPECT_EQ(m.vae_c.tensor("bn.running_var").to_vector(), std::vector<float>(size_t(4 * 8), 1.f));

    // Every file valid for the reference safetensors library (doctor warns otherwise; below).
    size_t files = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.path().extension() == ".safetensors") {
        const auto probs = safetensors_spec_problems(*SafeTensorsFile::open(e.path().string()));
        EXPECT_TRUE(probs.empty()) << probs[0];
        ++files;
      }
    EXPECT_EQ(files, st.files);

    DoctorReport r = run_doctor(dir);
    EXPECT_EQ(r.problems, 0) << r.json.dump(2);
    EXPECT_EQ(r.json["warnings"].size(), 0u) << r.json.dump(2);
  }
}

TEST(RandomFolder, BytesDoNotDependOnThreadsAndConvertAgrees) {
  TempDir d;
  RandomFolderOptions o = small_options();
  o.threads = 1;
  write_random_folder(d.str() + "/a", o);
  o.threads = 4;
  write_random_folder(d.str() + "/b", o);
  for (const auto& e : fs::recursive_directory_iterator(d.path / "a"))
    if (e.is_regular_file()) {
      EXPECT_EQ(read_all(e.path()), read_all(d.path / "b" / fs::relative(e.path(), d.path / "a"))) << e.path();
    }

  // convert: one thread or several, the same file.
  const ModelFolder m = ModelFolder::open(d.str() + "/a");
  for (WeightFormat f : {WeightFormat::BF16, WeightFormat::FP8}) {
    ConvertOptions c;
    c.format = f;
    c.threads = 1;
    const std::string one = d.str() + "/one.safetensors", many = d.str() + "/many.safetensors";
    const ConvertStats s1 = convert_model(m, one, c);
    c.threads = 4;
    size_t last = 0, calls = 0;
    const ConvertStats s4 = convert_model(m, many, c, [&](size_t done, size_t total) {
      EXPECT_GE(done, last);
      EXPECT_LE(done, total);
      last = done, ++calls;
    });
    EXPECT_EQ(s1.bytes, s4.bytes);
    EXPECT_EQ(last, s4.bytes);
    EXPECT_EQ(calls, s4.tensors);
    if (f == WeightFormat::FP8) { EXPECT_GT(s4.fp8, 0u); }
    EXPECT_EQ(read_all(one), read_all(many)) << weight_format_name(f);
    EXPECT_EQ(test::fatal_problems(ModelFolder::open(many)), "");
  }
}

TEST(RandomFolder, RefusesANonEmptyFolderAndAMissingTemplate) {
  TempDir d;
  RandomFolderOptions o = small_options();
  std::ofstream(d.path / "x") << "x";
  EXPECT_NE(test::error_of([&] { write_random_folder(d.str(), o); }).find("not an empty folder"), std::string::npos);
  o.template_dir = d.str() + "/nowhere";
  EXPECT_NE(test::error_of([&] { write_random_folder(d.str() + "/m", o); }).find("nowhere/tokenizer: missing"),
            std::string::npos);
}

TEST(StreamedWriter, FirstErrorStopsWorkersAndLeavesNoFile) {
  TempDir d;
  std::vector<PendingTensor> ts;
  for (int i = 0; i < 40; ++i)
    ts.push_back({"t" + std::to_string(i), DType::F32, {1000}, [i] {
                    ERNIE_CHECK(i != 17, "tensor 17 cannot be made");
                    return Tensor::zeros({1000}, DType::F32);
                  }});
  const std::string f = d.str() + "/x.safetensors";
  for (int threads : {1, 4}) {
    EXPECT_EQ(test::error_of([&] { save_safetensors_streamed(f, ts, {}, 64, {}, threads); }), "tensor 17 cannot be made");
    EXPECT_FALSE(fs::exists(f));
    EXPECT_FALSE(fs::exists(f + ".tmp"));
  }
  ts[17].make = [] { return Tensor::zeros({999}, DType::F32); };  // not what was announced
  EXPECT_NE(test::error_of([&] { save_safetensors_streamed(f, ts, {}, 64, {}, 4); }).find("announced as F32 [1000]"),
            std::string::npos);
  ts[17].make = [] { return Tensor::zeros({1000}, DType::F32); };
  save_safetensors_streamed(f, ts, {}, 64, {}, 4);
  auto file = SafeTensorsFile::open(f);
  EXPECT_EQ(file->tensors().size(), 40u);
}

TEST(LoadBench, ReportsTheBytesReadFromTheModel) {
  TempDir d;
  const std::string file = d.str() + "/tiny.safetensors";
  ConvertOptions c;
  c.include_pe = false;
  convert_model(ModelFolder::open(test::tiny_model()), file, c);
  auto load_gib = [](const std::string& model) {
    const test::CliRun r = test::run_cli("bench --model " + model + " --load-only --device cpu --dtype f32 --json 2>/dev/null");
    EXPECT_EQ(r.status, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_FALSE(j.contains("encode_s"));  // nothing but the load
    EXPECT_GT(j["load_gbps"].get<double>(), 0);
    return j["load_gib"].get<double>();
  };
  const ModelFolder m = ModelFolder::open(test::tiny_model());
  const double all = double(m.transformer_c.ckpt.bytes_on_disk() + m.text_encoder_c.ckpt.bytes_on_disk() +
                            m.vae_c.ckpt.bytes_on_disk()) / double(1 << 30);
  const double folder = load_gib(test::tiny_model());
  EXPECT_GT(folder, 0.5 * all);
  EXPECT_LT(folder, all);  // headers and the text encoder's unused last layer are not read
  EXPECT_DOUBLE_EQ(load_gib(file), folder);  // the same tensors in one file
}
