#include "convert/convert.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/random_folder.h"

namespace fs = std::filesystem;

namespace ernie {

namespace {
struct QuantizedPair {
  std::once_flag once;
  std::pair<Tensor, Tensor> q;
  std::atomic<int> left{2};
};
std::vector<const Component*> all_components(const ModelFolder& m) {
  std::vector<const Component*> v = {&m.transformer_c, &m.text_encoder_c, &m.vae_c};
  if (m.pe_c) v.push_back(&*m.pe_c);
  return v;
}
}  // namespace

std::vector<std::string> convert_inputs(const ModelFolder& m) {
  std::vector<std::string> inputs;
  for (const Component* c : all_components(m))
    for (const auto& f : c->ckpt.files()) inputs.push_back(f->path());
  if (m.is_single_file()) {
    inputs.push_back(m.root);
  } else {
    inputs.push_back((fs::path(m.root) / "model_index.json").string());
    for (const char* d : {"transformer", "text_encoder", "vae", "scheduler", "tokenizer", "pe", "pe_tokenizer"}) {
      std::error_code e2;
      for (fs::directory_iterator it(fs::path(m.root) / d, e2), end; !e2 && it != end; it.increment(e2))
        inputs.push_back(it->path().string());
    }
  }
  return inputs;
}

void check_convert_output(const ModelFolder& m, const std::string& out) {
  ERNIE_CHECK(!out.empty(), "convert: the output path is empty");
  check_output_path(out, convert_inputs(m), "the model's own input file");
  std::error_code ec;
  // A new .safetensors inside a checkpoint folder would be read as a second checkpoint of that component.
  if (!m.is_single_file() && fs::path(out).filename().string().ends_with(".safetensors")) {
    const fs::path parent = fs::weakly_canonical(fs::absolute(out).parent_path(), ec);
    for (const Component* c : all_components(m)) {
      std::error_code e2;
      ERNIE_CHECK(ec || c->dir.empty() || !fs::equivalent(parent, c->dir, e2), out, ": lies in the model's ", c->name,
                  "/ folder, which would then hold two checkpoints. Choose a path outside it");
    }
  }
}

ConvertStats convert_model(const ModelFolder& m, const std::string& out, const ConvertOptions& opt,
                           const std::function<void(size_t, size_t)>& progress) {
  auto t0 = std::chrono::steady_clock::now();
  ERNIE_CHECK(opt.dit_input_amax.empty() || opt.format == WeightFormat::FP8,
              "convert: static activation scales (calibration) apply to fp8 weights only, not ",
              weight_format_name(opt.format));
  check_convert_output(m, out);
  for (const Problem& p : m.check())
    ERNIE_CHECK(!p.fatal, m.root, ": cannot convert, ", p.component, ": ", p.message);
  std::vector<const Component*> comps = {&m.transformer_c, &m.text_encoder_c, &m.vae_c};
  if (opt.include_pe && m.pe_c) comps.push_back(&*m.pe_c);

  std::map<std::string, std::string> meta;
  meta["format"] = kModelFileFormat;
  meta["variant"] = m.turbo ? "turbo" : "base";
  meta["weights"] = weight_format_name(opt.format);
  meta["source"] = fs::path(m.root).filename().string();
  if (!opt.dit_input_amax.empty()) meta["activation_scales"] = "static";
  for (const char* rel : {"model_index.json", "transformer/config.json", "text_encoder/config.json", "vae/config.json",
                          "scheduler/scheduler_config.json", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"})
    if (m.has_file(rel)) meta[std::string("file:") + rel] = m.read_file(rel);
  if (m.from_files) {  // component files without --model: the configs read off their shapes
    meta["file:transformer/config.json"] = dit_config_json(m.dit);
    meta["file:text_encoder/config.json"] = text_encoder_config_json(m.text_encoder);
    meta["file:vae/config.json"] = vae_config_json(m.vae);
    const SchedulerConfig& sc = m.scheduler;
    meta["file:scheduler/scheduler_config.json"] =
        nlohmann::json{{"_class_name", "FlowMatchEulerDiscreteScheduler"}, {"num_train_timesteps", sc.num_train_timesteps},
                       {"shift", sc.shift}, {"use_dynamic_shifting", sc.use_dynamic_shifting},
                       {"base_shift", sc.base_shift}, {"max_shift", sc.max_shift},
                       {"base_image_seq_len", sc.base_image_seq_len}, {"max_image_seq_len", sc.max_image_seq_len},
                       {"time_shift_type", sc.time_shift_type}, {"invert_sigmas", sc.invert_sigmas}}
            .dump(2);
  }
  if (opt.include_pe && m.pe_c)
    for (const char* rel : {"pe/config.json", "pe/generation_config.json", "pe_tokenizer/tokenizer.json",
                            "pe_tokenizer/tokenizer_config.json", "pe_tokenizer/chat_template.jinja", "pe/tokenizer.json",
                            "pe/tokenizer_config.json", "pe/chat_template.jinja"})
      if (m.has_file(rel)) meta[std::string("file:") + rel] = m.read_file(rel);

  // Tensors in spec order, under "<component>/<original name>"; weights to bf16 or quantized. Each is
  // converted only when written.
  std::vector<PendingTensor> tensors;
  ConvertStats st;
  for (const Component* c : comps) {
    std::string own_prefix = c->prefix.substr(c->root.size());  // "language_model.model." etc.
    for (const TensorSpec& s : c->specs) {
      bool at_root = s.name[0] == '@';
      std::string local = at_root ? s.name.substr(1) : s.name;
      std::string rel = at_root ? local : own_prefix + local;
      const TensorInfo* ti = c->ckpt.find(at_root ? c->root + rel : c->stored_name(local));
      if (!ti) continue;  // optional and absent (required ones were checked above)
      // Written under our names and shapes whatever the source's layout (an LDM VAE's 1x1 attention convolutions
      // become the Linear weights they are).
      const Shape shape = c->conv_as_linear.count(local) ? s.shape : ti->shape;
      std::string dst = c->name + "/" + rel;
      bool q8 = opt.format != WeightFormat::BF16 && ti->shape.size() == 2 &&
                opt.policy.quantized(c->name, local, m.dit.num_layers);
      // Reads the source weight (de-quantized if the source is itself a quantized file).
      auto source = [c, at_root, local, full = c->root + rel] {
        return at_root ? c->ckpt.tensor(full) : c->tensor(local);
      };
      if (q8) {
        const DType qt = opt.policy.format(c->name, opt.format == WeightFormat::FP8 ? DType::F8_E4M3 : DType::I8);
        const WeightFormat qf = qt == DType::F8_E4M3 ? WeightFormat::FP8 : WeightFormat::INT8;
        // The weight and its scales come from one quantization, by whichever writer thread asks first;
        // the second to take its part frees the pair.
        auto shared = std::make_shared<QuantizedPair>();
        auto part = [shared, source, f = qf](bool scale) {
          std::call_once(shared->once, [&] { shared->q = quantize_rows(source(), f); });
          Tensor t = scale ? shared->q.second : shared->q.first;
          if (--shared->left == 0) shared->q = {};
          return t;
        };
        tensors.push_back({dst, qt, ti->shape, [part] { return part(false); }});
        tensors.push_back({dst + "_scale", DType::F32, {ti->shape[0]}, [part] { return part(true); }});
        if (!opt.dit_input_amax.empty() && qt == DType::F8_E4M3) {
          auto it = opt.dit_input_amax.find(local);
          ERNIE_CHECK(it != opt.dit_input_amax.end(), "convert: calibration recorded no input range for ", dst);
          const float s = it->second > 0.f ? it->second / kFp8E4m3Max : 1.f;
          tensors.push_back({dst + "_input_scale", DType::F32, {1}, [s] { return Tensor::from_vector({s}, {1}); }});
        }
        ++(qt == DType::F8_E4M3 ? st.fp8 : st.int8);
      } else {
        bool to_bf16 = dtype_is_float(ti->dtype) || c->is_quantized(local);
        DType dt = to_bf16 ? DType::BF16 : ti->dtype;
        tensors.push_back({dst, dt, shape, [=] {
                             Tensor t = source();
                             return to_bf16 ? t.cast(DType::BF16) : t;
                           }});
      }
    }
  }
  st.tensors = tensors.size();
  for (const PendingTensor& t : tensors) st.bytes += size_t(shape_numel(t.shape)) * dtype_size(t.dtype);
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  save_safetensors_streamed(out, tensors, meta, 64, progress, threads);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace ernie
