// The C API over ernie::Pipeline: every entry point catches everything and returns a status.
#include "ernie_image.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "core/error.h"
#include "pipeline/pipeline.h"

struct ernie_model {
  std::unique_ptr<ernie::Pipeline> pipe;
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

ernie::DType parse_dtype(const char* s, ernie::Device d) {
  if (!s || !*s) return d.is_cpu() ? ernie::DType::F32 : ernie::DType::BF16;
  std::string v = s;
  if (v == "f32" || v == "fp32" || v == "float32") return ernie::DType::F32;
  if (v == "bf16" || v == "bfloat16") return ernie::DType::BF16;
  ernie::fail("dtype: unknown type '", v, "' (use f32 or bf16)");
}

}  // namespace

extern "C" {

void ernie_options_init(ernie_options* opt) {
  if (!opt) return;
  std::memset(opt, 0, sizeof *opt);
  opt->keep_text_encoder = 1;
}

void ernie_request_init(ernie_request* req) {
  if (!req) return;
  std::memset(req, 0, sizeof *req);
  req->cfg = -1;
  req->num_images = 1;
}

ernie_status ernie_load(const ernie_options* opt, ernie_model** out, char** err) {
  if (out) *out = nullptr;
  return guarded(err, [&] {
    ERNIE_CHECK(opt && out, "ernie_load: options and out must not be NULL");
    ERNIE_CHECK(opt->model_dir && *opt->model_dir, "ernie_load: model_dir is required");
    ernie::PipelineOptions po;
    po.model_dir = opt->model_dir;
    po.device = ernie::Device::parse(opt->device && *opt->device ? opt->device : "cpu");
    po.dtype = parse_dtype(opt->dtype, po.device);
    ERNIE_CHECK(opt->threads >= 0, "ernie_load: threads must not be negative");
    po.threads = opt->threads;
    po.keep_text_encoder = opt->keep_text_encoder != 0;
    po.load_pe = opt->load_pe != 0;
    auto m = std::make_unique<ernie_model>();
    m->pipe = ernie::Pipeline::load(po);
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
    ERNIE_CHECK(req->prompt != nullptr, "ernie_generate: prompt is required");
    ernie::GenerateRequest r;
    r.prompt = req->prompt;
    r.negative_prompt = req->negative_prompt ? req->negative_prompt : "";
    r.width = req->width;
    r.height = req->height;
    r.steps = req->steps;
    r.cfg = req->cfg;
    r.seed = req->seed;
    r.num_images = req->num_images == 0 ? 1 : req->num_images;
    r.use_pe = req->use_pe != 0;
    if (req->init_latents) {
      // The shape follows from the request; resolve() then checks it against the model.
      ernie::GenerateRequest sized = r;
      if (sized.width == 0) sized.width = 1024;
      if (sized.height == 0) sized.height = 1024;
      const int s = model->pipe->scale_factor();
      ERNIE_CHECK(sized.width % s == 0 && sized.height % s == 0 && sized.width > 0 && sized.height > 0,
                  "size ", std::to_string(sized.width), "x", std::to_string(sized.height), " is not a multiple of ",
                  std::to_string(s));
      const int64_t hw = int64_t(sized.height / s) * (sized.width / s);
      ERNIE_CHECK(sized.num_images > 0 && req->init_latents_count % size_t(hw * sized.num_images) == 0,
                  "init_latents: ", std::to_string(req->init_latents_count), " floats do not fill ",
                  std::to_string(sized.num_images), " image(s) of ", std::to_string(sized.height / s), "x",
                  std::to_string(sized.width / s), " latents");
      const int64_t ch = int64_t(req->init_latents_count) / (hw * sized.num_images);
      std::vector<float> v(req->init_latents, req->init_latents + req->init_latents_count);
      r.init_latents = ernie::Tensor::from_vector(v, {sized.num_images, ch, sized.height / s, sized.width / s});
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
      imgs[i].seed = res.resolved.seed + uint64_t(i);
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
