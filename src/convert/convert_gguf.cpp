// convert -o x.gguf: the DiT as a GGUF (convert/convert.h).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "convert/convert.h"
#include "io/gguf_encode.h"
#include "core/ggml_types.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"

namespace ernie {

namespace {

// llama.cpp's general.file_type for a file mostly of `type` (LLAMA_FTYPE_*: K-quants as their _M mixes).
uint32_t file_type(int type) {
  switch (type) {
    case 0: return 0;     // ALL_F32
    case 1: return 1;     // MOSTLY_F16
    case 8: return 7;     // MOSTLY_Q8_0
    case 12: return 15;   // MOSTLY_Q4_K_M
    case 13: return 17;   // MOSTLY_Q5_K_M
    case 14: return 18;   // MOSTLY_Q6_K
    default: return 32;   // MOSTLY_BF16
  }
}

std::vector<uint8_t> encode_tensor(const Tensor& t, int type) {
  const Tensor f = t.to_f32();
  std::vector<uint8_t> out(ggml_nbytes(type, t.shape(), "tensor"));
  const GgmlType* g = ggml_type(uint32_t(type));
  if (g->decode) {
    ggml_encode(type, f.f32(), f.numel(), out.data());
  } else {
    const Tensor c = g->plain == DType::F32 ? f : f.cast(*g->plain);
    std::memcpy(out.data(), c.raw(), out.size());
  }
  return out;
}

}  // namespace

ConvertStats convert_dit_gguf(const ModelFolder& m, const std::string& out, int ggml_out, const QuantPolicy& policy,
                              const std::string& arch, const std::function<void(size_t, size_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  ERNIE_CHECK(!arch.empty() && arch.size() <= 64 &&
                  std::all_of(arch.begin(), arch.end(),
                              [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'; }),
              "--gguf-arch '", arch, "': expected a lower-case GGUF architecture name such as wan or ernie_image");
  const GgmlType* want = ggml_type(uint32_t(ggml_out));
  ERNIE_CHECK(want && (want->decode || want->plain), "convert: no GGUF output type ", std::to_string(ggml_out));
  check_convert_output(m, out);
  for (const Problem& p : m.check())
    ERNIE_CHECK(!p.fatal || p.component != "transformer", m.root, ": cannot convert, ", p.component, ": ", p.message);
  const Component& c = m.transformer_c;
  const int F32 = 0, BF16 = 30;
  std::vector<GgufOutTensor> tensors;
  ConvertStats st;
  for (const TensorSpec& s : c.specs) {
    const TensorInfo* ti = c.ckpt.find(c.stored_name(s.name));
    if (!ti) continue;
    int type = ti->shape.size() == 2 ? (ggml_out == F32 ? F32 : BF16) : F32;
    if (ti->shape.size() == 2 && (!want->decode || policy.quantized("transformer", s.name, m.dit.num_layers)) &&
        ti->shape.back() % want->block == 0)
      type = ggml_out;
    if (want->decode && type == ggml_out) ++st.ggml;
    tensors.push_back({s.name, ti->shape, type, [&c, name = s.name, type] { return encode_tensor(c.tensor(name), type); }});
    st.bytes += ggml_nbytes(type, ti->shape, s.name);
  }
  st.tensors = tensors.size();
  const std::string source = std::filesystem::path(m.root.empty() ? out : m.root).filename().string();
  write_gguf(out,
             {{"general.architecture", arch},
              {"general.name", source},
              {"general.quantization_version", uint32_t(2)},
              {"general.file_type", file_type(ggml_out)}},
             tensors, progress, convert_inputs(m));
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

ConvertStats convert_gguf_tensors(const std::string& in, const std::string& out, DType dtype,
                                  const std::function<void(size_t, size_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  check_output_path(out, {in});  // before anything is read
  const std::shared_ptr<TensorFile> f = open_tensor_file(in);
  ERNIE_CHECK(std::string(f->format()) == "gguf", in, ": not a GGUF file");
  std::vector<PendingTensor> tensors;
  ConvertStats st;
  for (const TensorInfo& ti : f->tensors()) {
    const DType dt = dtype_is_float(ti.dtype) ? dtype : ti.dtype;
    tensors.push_back({ti.name, dt, ti.shape, [f, name = ti.name, dt] {
                         Tensor t = f->tensor(name);
                         return t.dtype() == dt ? t : t.cast(dt);
                       }});
    st.bytes += size_t(shape_numel(ti.shape)) * dtype_size(dt);
    st.ggml += ti.ggml_type >= 0 && ggml_type(uint32_t(ti.ggml_type))->decode;
  }
  st.tensors = tensors.size();
  save_safetensors_streamed(out, tensors, {{"source", std::filesystem::path(in).filename().string()}}, 64, progress);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace ernie
