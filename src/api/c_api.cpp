// The C API over ernie::Engine: every entry point catches everything and returns a status.
#include "ernie_image.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "core/error.h"
#include "engine/engine.h"

struct ernie_model {
  std::unique_ptr<ernie::Engine> pipe;
};

namespace {

thread_local std::string g_last_error;

char* dup_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

ernie_status set_error(ernie_status st, const std::string& msg, char** err) {
  g_last_error = msg;
  if (err) *err = dup_string(msg);
  return st;
}

template <class F>
ernie_status guarded(char** err, F&& f) {
  if (err) *err = nullptr;
  g_last_error.clear();
  try {
    f();
    return ERNIE_OK;
  } catch (const ernie::Cancelled& e) {
    return set_error(ERNIE_ERR_CANCELLED, e.what(), err);
  } catch (const ernie::OutOfMemory& e) {
    return set_error(ERNIE_ERR_OOM, e.what(), err);
  } catch (const ernie::Error& e) {
    return set_error(ERNIE_ERR_INVALID, e.what(), err);
  } catch (const std::bad_alloc&) {
    return set_error(ERNIE_ERR_OOM, "out of host memory", err);
  } catch (const std::exception& e) {
    return set_error(ERNIE_ERR_INTERNAL, std::string("internal error: ") + e.what(), err);
  } catch (...) {
    return set_error(ERNIE_ERR_INTERNAL, "internal error", err);
  }
}

// ernie_memory_options -> the engine's memory, tiling and 8-bit options; throws naming the field.
void memory_options(const ernie_memory_options& m, const ernie_options& opt, ernie::EngineOptions& po) {
  switch (m.offload) {
    case ERNIE_OFFLOAD_DEFAULT: break;
    case ERNIE_OFFLOAD_NONE: po.offload = "none"; break;
    case ERNIE_OFFLOAD_TEXT_ENCODER: po.offload = "text-encoder"; break;
    case ERNIE_OFFLOAD_BLOCKS: po.offload = "blocks"; break;
    default: ernie::fail("ernie_memory_options.offload ", std::to_string(m.offload), ": not an ernie_offload (0-3)");
  }
  if (m.max_vram_gib != 0) po.max_vram_gib = m.max_vram_gib;
  // keep_text_encoder = 0 is ERNIE_OFFLOAD_TEXT_ENCODER: fine with a mode that frees the text encoder too.
  ERNIE_CHECK(opt.keep_text_encoder != 0 || (m.offload != ERNIE_OFFLOAD_NONE && !po.max_vram_gib),
              "ernie_options.keep_text_encoder = 0 contradicts ", po.max_vram_gib ? "max_vram_gib (it picks the mode)"
              : "offload ERNIE_OFFLOAD_NONE", ": leave keep_text_encoder at 1");
  switch (m.vae_tiling) {
    case ERNIE_VAE_TILING_AUTO: po.vae_tiling = ernie::VaeTilingMode::Auto; break;
    case ERNIE_VAE_TILING_ON: po.vae_tiling = ernie::VaeTilingMode::On; break;
    case ERNIE_VAE_TILING_OFF: po.vae_tiling = ernie::VaeTilingMode::Off; break;
    default: ernie::fail("ernie_memory_options.vae_tiling ", std::to_string(m.vae_tiling), ": not an ernie_vae_tiling (0-2)");
  }
  ERNIE_CHECK(m.vae_tile >= 0, "ernie_memory_options.vae_tile ", std::to_string(m.vae_tile), " must not be negative");
  po.vae_tile = m.vae_tile;
  if (m.struct_size > offsetof(ernie_memory_options, quantize)) switch (m.quantize) {
      case ERNIE_QUANTIZE_NONE: break;
      case ERNIE_QUANTIZE_FP8: po.quantize = "fp8"; break;
      case ERNIE_QUANTIZE_INT8: po.quantize = "int8"; break;
      default: ernie::fail("ernie_memory_options.quantize ", std::to_string(m.quantize), ": not an ernie_quantize (0-2)");
    }
  if (m.struct_size > offsetof(ernie_memory_options, attention_fp8)) {
    ERNIE_CHECK(m.attention_fp8 == 0 || m.attention_fp8 == 1, "ernie_memory_options.attention_fp8 ",
                std::to_string(m.attention_fp8), ": 0 or 1");
    po.attention = m.attention_fp8 == 1 ? "fp8" : "bf16";
  }
  if (m.struct_size > offsetof(ernie_memory_options, lora_at_runtime)) {
    ERNIE_CHECK(m.lora_at_runtime == 0 || m.lora_at_runtime == 1, "ernie_memory_options.lora_at_runtime ",
                std::to_string(m.lora_at_runtime), ": 0 or 1");
    po.lora_apply = m.lora_at_runtime == 1 ? "at_runtime" : "immediately";
  }
}

ernie_offload c_offload(ernie::Offload o) {
  switch (o) {
    case ernie::Offload::None: return ERNIE_OFFLOAD_NONE;
    case ernie::Offload::TextEncoder: return ERNIE_OFFLOAD_TEXT_ENCODER;
    case ernie::Offload::Blocks: return ERNIE_OFFLOAD_BLOCKS;
  }
  return ERNIE_OFFLOAD_DEFAULT;
}

// A request's init image or mask as the engine's Image: RGB from 3 or 4 channels (a mask's alpha kept, or
// grey from 1); bad sizes and channel counts throw naming the field.
ernie::Image c_image(const ernie_image& in, const char* field, bool mask) {
  ERNIE_CHECK(in.width > 0 && in.height > 0 && in.width <= 32768 && in.height <= 32768 && in.data, "ernie_request.",
              field, ": ", std::to_string(in.width), "x", std::to_string(in.height), " with data ",
              in.data ? "set" : "NULL", " is not an image");
  ERNIE_CHECK(in.channels == 3 || in.channels == 4 || (mask && in.channels == 1), "ernie_request.", field,
              ": channels ", std::to_string(in.channels), " must be 3 or 4", mask ? " (or 1)" : "");
  const size_t n = size_t(in.width) * size_t(in.height);
  ernie::Image out{in.width, in.height, std::vector<uint8_t>(n * 3), {}};
  if (mask && in.channels == 4) out.alpha.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = in.data + i * size_t(in.channels);
    for (int c = 0; c < 3; ++c) out.rgb[i * 3 + size_t(c)] = in.channels == 1 ? p[0] : p[c];
    if (!out.alpha.empty()) out.alpha[i] = p[3];
  }
  return out;
}

}  // namespace

extern "C" {

void ernie_options_init(ernie_options* opt) {
  if (!opt) return;
  std::memset(opt, 0, sizeof *opt);
  opt->struct_size = sizeof *opt;
  opt->keep_text_encoder = 1;
}

void ernie_lora_init(ernie_lora* lora) {
  if (!lora) return;
  std::memset(lora, 0, sizeof *lora);
  lora->struct_size = sizeof *lora;
  lora->scale = 1;
}

void ernie_request_init(ernie_request* req) {
  if (!req) return;
  std::memset(req, 0, sizeof *req);
  req->struct_size = sizeof *req;
  req->cfg = -1;
  req->strength = -1;
  req->num_images = 1;
}

void ernie_memory_options_init(ernie_memory_options* mem) {
  if (!mem) return;
  std::memset(mem, 0, sizeof *mem);
  mem->struct_size = sizeof *mem;
}

ernie_status ernie_load(const ernie_options* opt, ernie_model** out, char** err) {
  return ernie_load_ex(opt, nullptr, out, err);
}

void ernie_component_files_init(ernie_component_files* files) {
  if (!files) return;
  std::memset(files, 0, sizeof *files);
  files->struct_size = sizeof *files;
}

ernie_status ernie_load_ex(const ernie_options* opt, const ernie_memory_options* mem, ernie_model** out, char** err) {
  return ernie_load_components(opt, mem, nullptr, out, err);
}

ernie_status ernie_load_components(const ernie_options* opt, const ernie_memory_options* mem,
                                   const ernie_component_files* files, ernie_model** out, char** err) {
  if (out) *out = nullptr;
  return guarded(err, [&] {
    ERNIE_CHECK(opt && out, "ernie_load: options and out must not be NULL");
    constexpr size_t kFirstOptions = offsetof(ernie_options, gpus);  // the first version: no gpus, parallel
    ERNIE_CHECK(opt->struct_size == sizeof(ernie_options) || opt->struct_size == kFirstOptions,
                "ernie_options.struct_size ", std::to_string(opt->struct_size), ": this library takes ",
                std::to_string(sizeof(ernie_options)), " or ", std::to_string(kFirstOptions),
                " (set it up with ernie_options_init)");
    constexpr size_t kFirstVersion = offsetof(ernie_memory_options, quantize);  // before `quantize`
    constexpr size_t kSecondVersion = offsetof(ernie_memory_options, attention_fp8);
    constexpr size_t kThirdVersion = offsetof(ernie_memory_options, lora_at_runtime);
    ERNIE_CHECK(!mem || mem->struct_size == sizeof(ernie_memory_options) || mem->struct_size == kThirdVersion ||
                    mem->struct_size == kSecondVersion || mem->struct_size == kFirstVersion,
                "ernie_memory_options.struct_size ", std::to_string(mem ? mem->struct_size : 0),
                ": this library takes ", std::to_string(sizeof(ernie_memory_options)), ", ",
                std::to_string(kThirdVersion), ", ", std::to_string(kSecondVersion), " or ", std::to_string(kFirstVersion),
                " (set it up with ernie_memory_options_init)");
    constexpr size_t kFirstFiles = offsetof(ernie_component_files, text_encoder);  // diffusion_model only
    constexpr size_t kSecondFiles = offsetof(ernie_component_files, lora_dir);     // no lora_dir
    ERNIE_CHECK(!files || files->struct_size == sizeof(ernie_component_files) || files->struct_size == kSecondFiles ||
                    files->struct_size == kFirstFiles,
                "ernie_component_files.struct_size ", std::to_string(files ? files->struct_size : 0),
                ": this library takes ", std::to_string(sizeof(ernie_component_files)), ", ",
                std::to_string(kSecondFiles), " or ", std::to_string(kFirstFiles),
                " (set it up with ernie_component_files_init)");
    ernie::EngineOptions po;
    if (files) {
      auto str = [](const char* p) { return std::string(p ? p : ""); };
      po.files.diffusion_model = str(files->diffusion_model);
      if (files->struct_size >= kSecondFiles) {
        po.files.text_encoder = str(files->text_encoder);
        po.files.vae = str(files->vae);
        po.files.tokenizer = str(files->tokenizer);
      }
      if (files->struct_size >= sizeof(ernie_component_files)) po.lora_dir = str(files->lora_dir);
    }
    ERNIE_CHECK((opt->model_dir && *opt->model_dir) || po.files.any(),
                "ernie_load: model_dir is required (or every component as a file: ernie_component_files)");
    po.model = opt->model_dir ? opt->model_dir : "";
    po.device = opt->device && *opt->device ? opt->device : "cpu";  // the header's documented default
    po.dtype = opt->dtype ? opt->dtype : "";
    ERNIE_CHECK(opt->threads >= 0, "ernie_load: threads must not be negative");
    po.threads = opt->threads;
    po.pe = opt->load_pe ? ernie::PeLoad::Required : ernie::PeLoad::Off;
    po.default_offload = opt->keep_text_encoder ? ernie::Offload::None : ernie::Offload::TextEncoder;
    if (opt->struct_size >= sizeof(ernie_options)) {  // several GPUs (second version)
      po.gpus = opt->gpus ? opt->gpus : "";
      po.parallel = opt->parallel && *opt->parallel ? opt->parallel : "none";
      if (!po.gpus.empty() && !(opt->device && *opt->device)) po.device = "auto";  // --gpus names the devices
    }
    ernie_memory_options defaults;
    ernie_memory_options_init(&defaults);
    memory_options(mem ? *mem : defaults, *opt, po);
    auto m = std::make_unique<ernie_model>();
    m->pipe = ernie::Engine::open(po);
    *out = m.release();
  });
}

ernie_status ernie_generate(ernie_model* model, const ernie_request* req, ernie_progress_fn progress, void* user,
                            ernie_image** out_images, int* out_count, char** err) {
  if (out_images) *out_images = nullptr;
  if (out_count) *out_count = 0;
  return guarded(err, [&] {
    ERNIE_CHECK(model && model->pipe && req && out_images && out_count,
                "ernie_generate: model, request and outputs must not be NULL");
    constexpr size_t kFirstRequest = offsetof(ernie_request, loras);  // the first version with a struct_size
    constexpr size_t kSecondRequest = offsetof(ernie_request, init_image);  // LoRAs, no img2img
    ERNIE_CHECK(req->struct_size == sizeof(ernie_request) || req->struct_size == kSecondRequest ||
                    req->struct_size == kFirstRequest,
                "ernie_request.struct_size ", std::to_string(req->struct_size), ": this library takes ",
                std::to_string(sizeof(ernie_request)), ", ", std::to_string(kSecondRequest), " or ",
                std::to_string(kFirstRequest), " (set it up with ernie_request_init)");
    ERNIE_CHECK(req->prompt != nullptr, "ernie_generate: prompt is required");
    ernie::GenerateRequest r;
    r.prompt = req->prompt;
    r.negative_prompt = req->negative_prompt ? req->negative_prompt : "";
    r.width = req->width;
    r.height = req->height;
    r.steps = req->steps;
    r.cfg = req->cfg;
    r.seed = req->seed;
    r.seed_random = req->seed == ERNIE_SEED_RANDOM;  // C's -1: resolve_request draws one
    r.num_images = req->num_images == 0 ? 1 : req->num_images;
    r.use_pe = req->use_pe != 0;
    if (req->sampler && *req->sampler) r.sampler = ernie::parse_sampler(req->sampler, "sampler");
    r.shift = req->shift;
    if (req->rng && *req->rng) r.rng = ernie::parse_rng(req->rng, "rng");
    if (req->struct_size >= kSecondRequest) {
      ERNIE_CHECK(req->lora_count >= 0 && req->lora_count <= 64 && (req->loras || req->lora_count == 0),
                  "ernie_request: lora_count ", std::to_string(req->lora_count), " must be 0..64, with loras set");
      // The array's stride is its elements' struct_size (that of the caller's header), the same in each.
      const size_t stride = req->lora_count > 0 ? req->loras[0].struct_size : sizeof(ernie_lora);
      ERNIE_CHECK(stride == sizeof(ernie_lora), "ernie_request.loras[0].struct_size ", std::to_string(stride),
                  ": this library takes ", std::to_string(sizeof(ernie_lora)), " (set each up with ernie_lora_init)");
      for (int i = 0; i < req->lora_count; ++i) {
        const ernie_lora& l = *reinterpret_cast<const ernie_lora*>(reinterpret_cast<const char*>(req->loras) +
                                                                    size_t(i) * stride);
        ERNIE_CHECK(l.struct_size == stride, "ernie_request.loras[", std::to_string(i), "].struct_size ",
                    std::to_string(l.struct_size), " differs from loras[0]'s ", std::to_string(stride));
        const bool path = l.path && *l.path, name = l.name && *l.name;
        ERNIE_CHECK(path != name, "ernie_request.loras[", std::to_string(i), "]: set either path or name");
        ernie::LoraRef ref;
        (path ? ref.path : ref.name) = path ? l.path : l.name;
        ref.scale = l.scale;
        r.loras.push_back(ref);
      }
    }
    if (req->struct_size >= sizeof(ernie_request)) {
      if (req->init_image) r.init_image = c_image(*req->init_image, "init_image", false);
      if (req->mask) r.mask = c_image(*req->mask, "mask", true);
      r.strength = req->strength;
      r.mask_blur = req->mask_blur;
      r.composite = req->composite != 0;
      r.resize = req->resize != 0;
    }
    if (req->init_latents) {
      // A flat buffer: its shape follows from the request's size (the size rules of engine/request.h, which
      // checks it); resolve then checks the latents against the model.
      const ernie::ModelLimits& lim = model->pipe->limits();
      const auto [w, h] = ernie::request_size(r, lim);
      ernie::check_size(w, h, lim);
      const int s = lim.scale_factor;
      const int64_t hw = int64_t(h / s) * (w / s);
      ERNIE_CHECK(r.num_images > 0 && req->init_latents_count % size_t(hw * r.num_images) == 0,
                  "init_latents: ", std::to_string(req->init_latents_count), " floats do not fill ",
                  std::to_string(r.num_images), " image(s) of ", std::to_string(h / s), "x", std::to_string(w / s),
                  " latents");
      const int64_t ch = int64_t(req->init_latents_count) / (hw * r.num_images);
      std::vector<float> v(req->init_latents, req->init_latents + req->init_latents_count);
      r.init_latents = ernie::Tensor::from_vector(v, {r.num_images, ch, h / s, w / s});
    }
    ernie::ProgressFn fn;
    std::atomic<bool> cancel{false};
    if (progress)
      fn = [&](const ernie::Progress& p) {
        if (progress(p.phase.c_str(), p.step, p.total, p.elapsed_s, user) != 0) cancel = true;
      };
    ernie::GenerateResult res = model->pipe->generate(r, fn, &cancel);
    const int n = int(res.images.size());
    auto* imgs = static_cast<ernie_image*>(std::calloc(size_t(n), sizeof(ernie_image)));
    if (!imgs) throw std::bad_alloc();
    for (int i = 0; i < n; ++i) {
      const ernie::Image& im = res.images[size_t(i)];
      imgs[i].width = im.width;
      imgs[i].height = im.height;
      imgs[i].channels = 3;
      imgs[i].seed = ernie::image_seed(res.resolved.seed, i, res.resolved.rng);
      imgs[i].data = static_cast<uint8_t*>(std::malloc(im.rgb.size()));
      if (!imgs[i].data) {
        ernie_free_images(imgs, n);
        throw std::bad_alloc();
      }
      std::memcpy(imgs[i].data, im.rgb.data(), im.rgb.size());
    }
    *out_images = imgs;
    *out_count = n;
  });
}

ernie_status ernie_encode_prompt(ernie_model* model, const char* prompt, float** out_data, int* out_tokens,
                                 int* out_dim, char** err) {
  if (out_data) *out_data = nullptr;
  return guarded(err, [&] {
    ERNIE_CHECK(model && model->pipe && prompt && out_data && out_tokens && out_dim,
                "ernie_encode_prompt: arguments must not be NULL");
    ernie::Tensor h = model->pipe->encode_prompt(prompt);
    std::vector<float> v = h.to_vector();
    auto* p = static_cast<float*>(std::malloc(v.size() * sizeof(float)));
    if (!p) throw std::bad_alloc();
    std::memcpy(p, v.data(), v.size() * sizeof(float));
    *out_data = p;
    *out_tokens = int(h.dim(0));
    *out_dim = int(h.dim(1));
  });
}

ernie_offload ernie_model_offload(const ernie_model* model) {
  return model && model->pipe ? c_offload(model->pipe->info().memory.mode) : ERNIE_OFFLOAD_DEFAULT;
}

int ernie_scale_factor(const ernie_model* model) { return model && model->pipe ? model->pipe->scale_factor() : 0; }

void ernie_free_images(ernie_image* images, int count) {
  if (!images) return;
  for (int i = 0; i < count; ++i) std::free(images[i].data);
  std::free(images);
}

void ernie_free_floats(float* data) { std::free(data); }
void ernie_free(ernie_model* model) { delete model; }
void ernie_free_string(char* s) { std::free(s); }
const char* ernie_last_error(void) { return g_last_error.c_str(); }
const char* ernie_version(void) { return ERNIE_VERSION; }

}  // extern "C"
