#include "doctor/doctor.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/system_info.h"
#include "doctor/doctor_gpu.h"
#include "doctor/doctor_topology.h"
#include "engine/memory_plan.h"
#include "core/ggml_types.h"
#include "io/model_folder.h"
#include "io/model_tokenizer.h"
#include "io/safetensors.h"
#include "io/safetensors_spec.h"
#include "ops/tuning_cache.h"
#include "text/chat_template.h"
#include "text/pe_prompt.h"

using json = nlohmann::json;

namespace ernie {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string human_bytes(double bytes) {
  char b[32];
  if (bytes >= kGiB) std::snprintf(b, sizeof b, "%.2f GiB", bytes / kGiB);
  else std::snprintf(b, sizeof b, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return b;
}

// Runs `f`; an error it throws becomes the problem "<what>: <message>" instead of ending the report.
template <class F>
void attempt(json& problems, const std::string& what, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    problems.push_back(what + ": " + e.what());
  } catch (const std::exception& e) {
    problems.push_back(what + ": " + e.what());
  }
}

// What generate, enhance and serve read besides tensors and configs: the tokenizers, the prompt enhancer's
// chat template (rendered once over a sample request, as PromptEnhancer::load and render do) and
// pe/generation_config.json (parsed with the same checks).
void check_text_side(const ModelFolder& mf, json& m, json& problems, json& warnings) {
  json t = json::object();
  attempt(problems, "tokenizer", [&] {
    const Tokenizer tok = load_model_tokenizer(mf, "tokenizer");
    const size_t ids = tok.encode("a cat on a windowsill, morning light").size();
    t["tokenizer"] = {{"vocab_size", tok.vocab_size()}, {"sample_tokens", ids}};
    if (int64_t(tok.vocab_size()) > mf.text_encoder.vocab_size)
      warnings.push_back("tokenizer: " + std::to_string(tok.vocab_size()) +
                         " tokens but text_encoder/config.json has vocab_size " +
                         std::to_string(mf.text_encoder.vocab_size));
  });
  if (mf.pe_c) {
    const std::string rel = mf.pe_tokenizer_rel;
    if (rel.empty()) {
      problems.push_back("pe: the prompt enhancer has no tokenizer (pe_tokenizer/tokenizer.json or pe/tokenizer.json)");
    } else {
      const std::string where = mf.root + "/" + rel;
      attempt(problems, rel, [&] {
        const Tokenizer tok = load_model_tokenizer(mf, rel);
        ERNIE_CHECK(tok.eos_id() >= 0, where, "/tokenizer_config.json: no eos_token (generation could never stop)");
        ERNIE_CHECK(!mf.pe || int64_t(tok.vocab_size()) <= mf.pe->vocab_size, where, "/tokenizer.json: ",
                    std::to_string(tok.vocab_size()), " tokens but pe/config.json has vocab_size ",
                    std::to_string(mf.pe ? mf.pe->vocab_size : 0));
        t[rel] = {{"vocab_size", tok.vocab_size()}};
      });
      attempt(problems, rel + " chat template", [&] {
        const std::string config_text =
            mf.has_file(rel + "/tokenizer_config.json") ? mf.read_file(rel + "/tokenizer_config.json") : "";
        json cfg_plain;
        nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
        if (!config_text.empty()) {
          cfg_plain = json::parse(config_text, nullptr, false);
          ERNIE_CHECK(!cfg_plain.is_discarded() && cfg_plain.is_object(), where,
                      "/tokenizer_config.json: not a JSON object");
          cfg = nlohmann::ordered_json::parse(config_text);
        }
        std::optional<std::string> jinja;
        if (mf.has_file(rel + "/chat_template.jinja")) jinja = mf.read_file(rel + "/chat_template.jinja");
        const ChatTemplate tmpl(select_chat_template(jinja, cfg_plain, where));
        const std::string out = tmpl.render(chat_template_context(pe_messages("a cat", 1024, 1024), cfg));
        ERNIE_CHECK(!out.empty(), where, ": the chat template renders a sample request as nothing");
        t["chat_template"] = {{"source", jinja ? rel + "/chat_template.jinja" : rel + "/tokenizer_config.json"},
                              {"sample_chars", out.size()}};
      });
    }
    if (mf.has_file("pe/generation_config.json"))
      attempt(problems, "pe/generation_config.json", [&] {
        const json gen = json::parse(mf.read_file("pe/generation_config.json"), nullptr, false);
        ERNIE_CHECK(!gen.is_discarded() && gen.is_object(), mf.root, "/pe/generation_config.json: not a JSON object");
        if (gen.contains("top_k") && !gen["top_k"].is_null())
          ERNIE_CHECK(gen["top_k"].is_number_integer() && gen["top_k"].get<int64_t>() >= 0, mf.root,
                      "/pe/generation_config.json: top_k must be a non-negative integer");
        t["generation_config"] = "ok";
      });
  }
  m["text"] = t;
}

// Each safetensors file the model reads, once (a converted file backs every component).
std::vector<std::shared_ptr<SafeTensorsFile>> model_files(const ModelFolder& mf) {
  std::vector<std::shared_ptr<SafeTensorsFile>> files;
  for (const Component* c : {&mf.transformer_c, &mf.text_encoder_c, &mf.vae_c, mf.pe_c ? &*mf.pe_c : nullptr})
    if (c)
      for (const auto& f : c->ckpt.files())
        if (auto st = std::dynamic_pointer_cast<SafeTensorsFile>(f);
            st && std::none_of(files.begin(), files.end(), [&](const auto& g) { return g->path() == f->path(); }))
          files.push_back(st);
  return files;
}

// Files that load here but that the reference safetensors library would refuse (io/safetensors_spec.h):
// warnings, since this program still reads them.
void check_spec(const ModelFolder& mf, json& m, json& warnings) {
  size_t clean = 0;
  for (const auto& f : model_files(mf)) {
    const std::vector<std::string> p = safetensors_spec_problems(*f);
    for (const std::string& w : p) warnings.push_back(w);
    clean += p.empty();
  }
  m["spec_clean_files"] = clean;
}

// Each safetensors file the model reads: its data checksum (io/safetensors.h), read and compared with --verify.
void check_checksums(const ModelFolder& mf, const DoctorOptions& opt, json& m, json& problems) {
  json list = json::array();
  for (const auto& f : model_files(mf)) {
    ChecksumCheck r;
    r.status = checksum_status(f->metadata());
    if (opt.verify && r.status == ChecksumStatus::Unverified) r = verify_data_checksum(*f, opt.threads);
    json e = {{"path", f->path()}, {"checksum", checksum_status_name(r.status)}};
    if (!r.stored.empty()) e["stored"] = r.stored;
    if (!r.computed.empty()) e["computed"] = r.computed;
    list.push_back(e);
    const std::string where = f->path() + ": ";
    if (r.status == ChecksumStatus::Mismatch)
      problems.push_back(where + "data checksum mismatch (" + std::string(kDataChecksumKey) + " " + r.stored +
                         ", data hashes to " + r.computed + "): the file is corrupt or was changed after writing");
    else if (r.status == ChecksumStatus::Incomplete)
      problems.push_back(where + "incomplete: its writer never finished (" + std::string(kDataChecksumKey) +
                         " is still the placeholder)");
    else if (r.status == ChecksumStatus::Malformed)
      problems.push_back(where + std::string(kDataChecksumKey) + " '" + r.stored + "' is not a checksum");
  }
  m["files"] = list;
  m["verified"] = opt.verify;
}
}  // namespace

DoctorReport run_doctor(const std::string& model_dir, const DoctorOptions& opt) {
  DoctorReport r;
  json& j = r.json;
  SystemInfo si = query_system_info();
  j["build"] = {{"version", si.version}, {"cuda", si.cuda_built},     {"cuda_runtime", si.cuda_runtime},
                {"cublas", si.cublas},   {"cudnn", si.cudnn},         {"nccl", si.nccl},
                {"omp_threads", si.omp_threads}};
  j["driver"] = {{"cuda_driver", si.cuda_driver}, {"driver_version", si.driver_version}};
  j["gpus"] = json::array();
  for (const GpuInfo& g : si.gpus)
    j["gpus"].push_back({{"index", g.index},
                         {"name", g.name},
                         {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
                         {"total_gib", g.total_bytes / kGiB},
                         {"free_gib", g.free_bytes / kGiB},
                         {"hopper", g.cc_major == 9}});
  if (si.gpus.empty()) j["gpu_error"] = si.gpu_error;
  j["env"] = json::object();
  for (auto& [k, v] : si.env) j["env"][k] = v;
  j["tuning_cache"] = tuning::report();
  j["problems"] = json::array();
  j["warnings"] = json::array();
  add_gpu_checks(si, j);
  add_gpu_topology(si, j);

  if (!model_dir.empty() || opt.files.any()) {
    json m;
    m["path"] = model_dir.empty() ? std::string("(component files)") : model_dir;
    try {
      ModelFolder mf = ModelFolder::open(model_dir, true, opt.files);
      m["variant"] = mf.turbo ? "ERNIE-Image-Turbo" : "ERNIE-Image";
      if (mf.from_files) m["configs"] = "read off the component files' tensor shapes (released values elsewhere)";
      m["components"] = json::object();
      auto comp = [&](const Component& c) {
        const double bf16 = double(c.params()) * 2;
        m["components"][c.name] = {{"params", c.params()},
                                   {"dtype", c.dominant_dtype()},
                                   {"bytes_on_disk", c.stored_bytes()},
                                   {"files", c.ckpt.files().size()},
                                   {"prefix", c.prefix},
                                   {"bf16_gib", bf16 / kGiB}};
        json types = json::object();  // tensors per stored type: GGML names for GGUF files, else dtypes
        for (const TensorInfo* t : c.ckpt.tensors()) {
          const GgmlType* g = t->ggml_type >= 0 ? ggml_type(uint32_t(t->ggml_type)) : nullptr;
          const std::string name = g ? g->name : dtype_name(t->dtype);
          types[name] = types.value(name, 0) + 1;
        }
        m["components"][c.name]["types"] = types;
        m["components"][c.name]["format"] = c.ckpt.files().empty() ? "" : c.ckpt.files()[0]->format();
        if (!c.source.empty()) m["components"][c.name]["file"] = c.source;
        if (!c.layout.empty()) m["components"][c.name]["layout"] = c.layout;
        return bf16;
      };
      for (const Component* c : {&mf.transformer_c, &mf.text_encoder_c, &mf.vae_c}) comp(*c);
      if (mf.pe_c) comp(*mf.pe_c);
      m["tokenizer"] = mf.tokenizer_dir;
      m["prompt_enhancer"] = mf.pe_c.has_value();
      m["dit"] = {{"hidden_size", mf.dit.hidden_size}, {"layers", mf.dit.num_layers},
                  {"heads", mf.dit.num_attention_heads}, {"scale_factor", mf.vae.scale_factor()}};
      for (const Problem& p : mf.check()) {
        std::string msg = p.component + ": " + p.message;
        if (p.fatal) j["problems"].push_back(msg);
        else j["warnings"].push_back(msg);
      }
      check_text_side(mf, m, j["problems"], j["warnings"]);
      check_checksums(mf, opt, m, j["problems"]);
      check_spec(mf, m, j["warnings"]);
      // Device memory at 1024x1024 with guidance (2 rows), a 256-token prompt, bf16 (8-bit weights where the
      // file stores them so), per low-VRAM mode.
      GenerationShape shape;
      set_8bit_weights(shape, &mf, std::nullopt);
      const MemoryEstimate est = estimate_memory({mf.dit, mf.text_encoder, mf.vae, std::nullopt}, shape);
      json fit;
      fit["at"] = std::string("1024x1024, cfg > 1, 256 prompt tokens, bf16") +
                  (shape.quantize ? std::string(", ") + dtype_name(*shape.quantize) + " DiT" : "") +
                  (shape.text_encoder_8bit ? ", 8-bit text encoder" : "");
      for (Offload o : {Offload::None, Offload::TextEncoder, Offload::Blocks})
        fit[std::string(offload_name(o)) + "_gib"] = double(est.peak(o)) / kGiB;
      fit["runtime_overhead_gib"] = double(kRuntimeOverheadBytes) / kGiB;
      m["components"]["transformer"]["gpu_gib"] = double(est.dit) / kGiB;  // GGML blocks counted as stored
      // A bf16 model: what it would need as an fp8 file, for the advice to convert.
      GenerationShape fp8_shape = shape;
      fp8_shape.quantize = DType::F8_E4M3;
      fp8_shape.text_encoder_8bit = true;
      const std::optional<MemoryEstimate> as_fp8 =
          shape.quantize ? std::nullopt
                         : std::optional(estimate_memory({mf.dit, mf.text_encoder, mf.vae, std::nullopt}, fp8_shape));
      if (as_fp8) fit["fp8_file_blocks_gib"] = double(as_fp8->peak(Offload::Blocks)) / kGiB;
      for (const GpuInfo& g : si.gpus) {
        const size_t usable = g.free_bytes > kRuntimeOverheadBytes ? size_t(g.free_bytes) - kRuntimeOverheadBytes : 0;
        fit["gpu" + std::to_string(g.index)] = gpu_fit(est, usable, as_fp8 ? &*as_fp8 : nullptr);
      }
      m["memory"] = fit;
    } catch (const Error& e) {
      j["problems"].push_back(e.what());
    } catch (const std::exception& e) {  // a file system error: still a report, not a crash
      j["problems"].push_back(model_dir + ": " + e.what());
    }
    j["model"] = m;
  }
  r.problems = int(j["problems"].size());
  j["ok"] = r.problems == 0;
  return r;
}

std::string format_doctor(const json& j) {
  std::ostringstream o;
  const json& b = j["build"];
  o << "ernie-image " << b["version"].get<std::string>() << "\n";
  o << "  CUDA backend: " << (b["cuda"].get<bool>() ? "on (runtime " + b["cuda_runtime"].get<std::string>() + ")" : "off")
    << "\n";
  auto ver = [](const json& v) { return v.get<std::string>().empty() ? std::string("not found") : v.get<std::string>(); };
  o << "  cuBLASLt " << ver(b["cublas"]) << ", cuDNN " << ver(b["cudnn"]) << ", NCCL " << ver(b["nccl"])
    << ", OpenMP threads " << b["omp_threads"] << "\n";
  o << "  driver: " << ver(j["driver"]["driver_version"]) << " (CUDA " << ver(j["driver"]["cuda_driver"]) << ")\n";
  if (j["gpus"].empty()) o << "GPUs: none (" << j.value("gpu_error", std::string("unknown")) << ")\n";
  for (const json& g : j["gpus"]) {
    char line[256];
    std::snprintf(line, sizeof line, "GPU %d: %s, compute %s, %.1f GiB total, %.1f GiB free\n", g["index"].get<int>(),
                  g["name"].get<std::string>().c_str(), g["compute_capability"].get<std::string>().c_str(),
                  g["total_gib"].get<double>(), g["free_gib"].get<double>());
    o << line;
    format_gpu_checks(g, o);
  }
  format_gpu_topology(j, o);
  format_host_checks(j, o);
  if (j["env"].empty()) o << "  device selection: no CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES set (all visible)\n";
  for (auto it = j["env"].begin(); it != j["env"].end(); ++it)
    o << "  " << it.key() << "=" << it.value().get<std::string>() << "\n";
  if (j.contains("tuning_cache")) {
    const json& t = j["tuning_cache"];
    o << "tuning cache: " << (t["dir"] == "" ? std::string("no directory (set ERNIE_CACHE_DIR)") : t["dir"].get<std::string>())
      << (t["enabled"].get<bool>() ? "" : " (ERNIE_TUNE=0: tuning off)") << "\n";
    if (t["files"].empty()) o << "  empty: the first run of each shape measures its kernels\n";
    for (const json& f : t["files"])
      o << "  " << f["file"].get<std::string>() << ": "
        << (f.contains("error") ? f["error"].get<std::string>()
                                : std::to_string(f["entries"].get<size_t>()) + " entries for " + f["identity"].get<std::string>())
        << "\n";
  }
  if (j.contains("model")) {
    const json& m = j["model"];
    o << "model " << m["path"].get<std::string>();
    if (m.contains("variant")) o << " (" << m["variant"].get<std::string>() << ")";
    o << "\n";
    if (m.contains("components"))
      for (auto it = m["components"].begin(); it != m["components"].end(); ++it) {
        const json& c = it.value();
        char line[256];
        std::snprintf(line, sizeof line, "  %-13s %14s params  %-5s  %s on disk\n", it.key().c_str(),
                      std::to_string(c["params"].get<size_t>()).c_str(), c["dtype"].get<std::string>().c_str(),
                      human_bytes(double(c["bytes_on_disk"].get<size_t>())).c_str());
        o << line;
        if (c.contains("types")) {
          o << "                " << c.value("format", std::string()) << ":";
          for (auto t = c["types"].begin(); t != c["types"].end(); ++t)
            o << " " << t.key() << " x" << t.value().get<int>();
          if (c.contains("gpu_gib"))
            o << "; " << human_bytes(c["gpu_gib"].get<double>() * kGiB) << " of weights on the GPU";
          o << "\n";
        }
        if (c.contains("file"))
          o << "                from " << c["file"].get<std::string>()
            << (c.contains("layout") ? " (" + c["layout"].get<std::string>() + " layout)" : std::string()) << "\n";
      }
    if (m.contains("configs")) o << "  configs " << m["configs"].get<std::string>() << "\n";
    if (m.contains("files")) {
      size_t none = 0;
      for (const json& f : m["files"]) {
        const std::string st = f["checksum"].get<std::string>();
        if (st == "none") {
          ++none;
          continue;
        }
        o << "  " << f["path"].get<std::string>() << ": data checksum "
          << (st == "not verified" ? std::string("present, not verified (--verify reads the data)") : st) << "\n";
      }
      if (none)
        o << "  data checksum: none in " << none << " file(s) (written by other tools; nothing to verify)\n";
    }
    if (m.contains("memory")) {
      const json& f = m["memory"];
      char line[400];
      std::snprintf(line, sizeof line,
                    "  device memory at %s: ~%.1f GiB resident, ~%.1f GiB --offload text-encoder, ~%.1f GiB "
                    "--offload blocks (+%.1f GiB CUDA runtime)\n",
                    f["at"].get<std::string>().c_str(), f["none_gib"].get<double>(), f["text-encoder_gib"].get<double>(),
                    f["blocks_gib"].get<double>(), f["runtime_overhead_gib"].get<double>());
      o << line;
      if (f.contains("fp8_file_blocks_gib")) {
        std::snprintf(line, sizeof line, "  as an fp8 file (convert --dtype fp8): ~%.1f GiB --offload blocks\n",
                      f["fp8_file_blocks_gib"].get<double>());
        o << line;
      }
      for (auto it = f.begin(); it != f.end(); ++it)
        if (it.key().rfind("gpu", 0) == 0) o << "  " << it.key() << ": " << it.value().get<std::string>() << "\n";
    }
  }
  for (const json& w : j["warnings"]) o << "warning: " << w.get<std::string>() << "\n";
  for (const json& p : j["problems"]) o << "problem: " << p.get<std::string>() << "\n";
  o << (j["ok"].get<bool>() ? "all is well\n" : std::to_string(j["problems"].size()) + " problem(s) found\n");
  return o.str();
}

}  // namespace ernie
