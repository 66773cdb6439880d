#include "io/model_file.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fs = std::filesystem;

namespace ernie {

WeightFormat parse_weight_format(const std::string& s) {
  if (s == "bf16") return WeightFormat::BF16;
  if (s == "fp8") return WeightFormat::FP8;
  if (s == "int8") return WeightFormat::INT8;
  fail("unknown weight format '", s, "' (expected bf16, fp8 or int8)");
}

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::FP8: return "fp8";
    case WeightFormat::INT8: return "int8";
    default: return "bf16";
  }
}

bool QuantPolicy::quantized(const std::string& component, const std::string& name, int dit_layers) const {
  if (component != "transformer" && !(quantize_text_encoder && (component == "text_encoder" || component == "pe")))
    return false;
  if (!name.ends_with(".weight")) return false;
  for (const std::string& k : keep)
    if (name.find(k) != std::string::npos) return false;
  if (component == "transformer" && keep_first_last_dit_blocks &&
      (name.rfind("layers.0.", 0) == 0 || name.rfind("layers." + std::to_string(dit_layers - 1) + ".", 0) == 0))
    return false;
  // Only the linear projections: attention and MLP.
  return name.find("self_attention.to_") != std::string::npos || name.find("self_attn.") != std::string::npos ||
         name.find("mlp.") != std::string::npos;
}

namespace {
// The largest finite e4m3 magnitude.
constexpr float kFp8Max = 448.f;

uint8_t f32_to_fp8_e4m3(float f) {
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fmin(std::fabs(f), kFp8Max);
  if (a < std::ldexp(1.f, -10)) return sign;  // below half the smallest subnormal
  // Search the 127 non-negative finite codes for the nearest (ties to even code); exact and simple.
  int lo = 0, hi = 0x7e;
  while (lo < hi) {  // first code whose value >= a
    int mid = (lo + hi) / 2;
    if (fp8_e4m3_to_f32(uint8_t(mid)) < a) lo = mid + 1;
    else hi = mid;
  }
  int best = lo;
  if (lo > 0) {
    float up = fp8_e4m3_to_f32(uint8_t(lo)) - a, down = a - fp8_e4m3_to_f32(uint8_t(lo - 1));
    if (down < up || (down == up && (lo - 1) % 2 == 0)) best = lo - 1;
  }
  return sign | uint8_t(best);
}
}  // namespace

std::pair<Tensor, Tensor> quantize_rows(const Tensor& w, WeightFormat f) {
  ERNIE_CHECK(w.ndim() == 2, "quantize: weight ", shape_str(w.shape()), " is not 2-D");
  ERNIE_CHECK(f != WeightFormat::BF16, "quantize: bf16 is not a quantized format");
  Tensor wf = w.device().is_cpu() ? w.to_f32() : w.to(kCPU).to_f32();
  const int64_t rows = w.dim(0), cols = w.dim(1);
  Tensor q = Tensor::empty(w.shape(), f == WeightFormat::FP8 ? DType::F8_E4M3 : DType::I8);
  Tensor scale = Tensor::empty({rows}, DType::F32);
  const float* src = wf.f32();
  float* sc = scale.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = src + r * cols;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::fmax(amax, std::fabs(row[c]));
    float qmax = f == WeightFormat::FP8 ? kFp8Max : 127.f;
    float s = amax > 0 ? amax / qmax : 1.f;
    sc[r] = s;
    if (f == WeightFormat::FP8) {
      uint8_t* dst = q.data<uint8_t>() + r * cols;
      for (int64_t c = 0; c < cols; ++c) dst[c] = f32_to_fp8_e4m3(row[c] / s);
    } else {
      int8_t* dst = q.data<int8_t>() + r * cols;
      for (int64_t c = 0; c < cols; ++c) dst[c] = int8_t(std::lrint(std::fmax(-127.f, std::fmin(127.f, row[c] / s))));
    }
  }
  return {q, scale};
}

Tensor dequantize_rows(const Tensor& q, const Tensor& scale) {
  ERNIE_CHECK(q.ndim() == 2 && scale.ndim() == 1 && scale.dim(0) == q.dim(0) && scale.dtype() == DType::F32, "dequantize: ",
              shape_str(q.shape()), " with scales ", shape_str(scale.shape()), " ", dtype_name(scale.dtype()));
  ERNIE_CHECK(q.dtype() == DType::F8_E4M3 || q.dtype() == DType::I8, "dequantize: unsupported dtype ",
              dtype_name(q.dtype()));
  const int64_t rows = q.dim(0), cols = q.dim(1);
  Tensor out = Tensor::empty(q.shape(), DType::F32);
  const float* sc = scale.data<float>();
  float* o = out.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if (q.dtype() == DType::I8) {
      const int8_t* src = q.data<int8_t>() + r * cols;
      for (int64_t c = 0; c < cols; ++c) o[r * cols + c] = float(src[c]) * sc[r];
    } else {
      const uint8_t* src = q.data<uint8_t>() + r * cols;
      for (int64_t c = 0; c < cols; ++c) o[r * cols + c] = fp8_e4m3_to_f32(src[c]) * sc[r];
    }
  }
  return out;
}

namespace {
struct QuantizedPair {
  std::once_flag once;
  std::pair<Tensor, Tensor> q;
  std::atomic<int> left{2};
};
}  // namespace

ConvertStats convert_model(const ModelFolder& m, const std::string& out, const ConvertOptions& opt,
                           const std::function<void(size_t, size_t)>& progress) {
  auto t0 = std::chrono::steady_clock::now();
  for (const Problem& p : m.check())
    ERNIE_CHECK(!p.fatal, m.root, ": cannot convert, ", p.component, ": ", p.message);
  std::vector<const Component*> comps = {&m.transformer_c, &m.text_encoder_c, &m.vae_c};
  if (opt.include_pe && m.pe_c) comps.push_back(&*m.pe_c);

  std::map<std::string, std::string> meta;
  meta["format"] = kModelFileFormat;
  meta["variant"] = m.turbo ? "turbo" : "base";
  meta["weights"] = weight_format_name(opt.format);
  meta["source"] = fs::path(m.root).filename().string();
  for (const char* rel : {"model_index.json", "transformer/config.json", "text_encoder/config.json", "vae/config.json",
                          "scheduler/scheduler_config.json", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"})
    if (m.has_file(rel)) meta[std::string("file:") + rel] = m.read_file(rel);
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
      const TensorInfo* ti = c->ckpt.find(c->root + rel);
      if (!ti) continue;  // optional and absent (required ones were checked above)
      std::string dst = c->name + "/" + rel;
      bool q8 = opt.format != WeightFormat::BF16 && ti->shape.size() == 2 &&
                opt.policy.quantized(c->name, local, m.dit.num_layers);
      // Reads the source weight (de-quantized if the source is itself a quantized file).
      auto source = [c, at_root, local, full = c->root + rel] {
        return at_root ? c->ckpt.tensor(full) : c->tensor(local);
      };
      if (q8) {
        DType qt = opt.format == WeightFormat::FP8 ? DType::F8_E4M3 : DType::I8;
        // The weight and its scales come from one quantization, by whichever writer thread asks first;
        // the second to take its part frees the pair.
        auto shared = std::make_shared<QuantizedPair>();
        auto part = [shared, source, f = opt.format](bool scale) {
          std::call_once(shared->once, [&] { shared->q = quantize_rows(source(), f); });
          Tensor t = scale ? shared->q.second : shared->q.first;
          if (--shared->left == 0) shared->q = {};
          return t;
        };
        tensors.push_back({dst, qt, ti->shape, [part] { return part(false); }});
        tensors.push_back({dst + "_scale", DType::F32, {ti->shape[0]}, [part] { return part(true); }});
        ++st.quantized;
      } else {
        bool to_bf16 = dtype_is_float(ti->dtype) || c->is_quantized(local);
        DType dt = to_bf16 ? DType::BF16 : ti->dtype;
        tensors.push_back({dst, dt, ti->shape, [=] {
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
