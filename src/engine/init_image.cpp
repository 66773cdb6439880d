#include "engine/init_image.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/float_text.h"

namespace ernie {
namespace {

using std::to_string;

// Lanczos-3: sinc(x) sinc(x / 3) on |x| < 3.
double lanczos3(double x) {
  auto sinc = [](double t) {
    if (t == 0) return 1.0;
    t *= M_PI;
    return std::sin(t) / t;
  };
  return std::fabs(x) < 3 ? sinc(x) * sinc(x / 3) : 0.0;
}

// PIL's precompute_coeffs: for each output index, the first input index and the normalised weights.
struct Taps {
  std::vector<int> first;
  std::vector<std::vector<double>> w;
};
Taps lanczos_taps(int in, int out) {
  const double scale = double(in) / out, filterscale = std::max(scale, 1.0), support = 3 * filterscale;
  Taps t;
  for (int x = 0; x < out; ++x) {
    const double center = (x + 0.5) * scale;
    const int lo = std::max(int(center - support + 0.5), 0), hi = std::min(int(center + support + 0.5), in);
    std::vector<double> w;
    double sum = 0;
    for (int i = lo; i < hi; ++i) sum += w.emplace_back(lanczos3((i - center + 0.5) / filterscale));
    for (double& v : w) v = sum != 0 ? v / sum : 0;
    t.first.push_back(lo);
    t.w.push_back(std::move(w));
  }
  return t;
}

// One separable pass over `c`-channel float rows: along x (horizontal) or y.
std::vector<float> resample(const std::vector<float>& src, int W, int H, int c, int outW, int outH) {
  const Taps tx = lanczos_taps(W, outW), ty = lanczos_taps(H, outH);
  std::vector<float> mid(size_t(outW) * H * c), out(size_t(outW) * outH * c);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < outW; ++x)
      for (int k = 0; k < c; ++k) {
        double s = 0;
        for (size_t i = 0; i < tx.w[size_t(x)].size(); ++i)
          s += tx.w[size_t(x)][i] * src[(size_t(y) * W + size_t(tx.first[size_t(x)]) + i) * c + k];
        mid[(size_t(y) * outW + x) * c + k] = float(s);
      }
  for (int y = 0; y < outH; ++y)
    for (int x = 0; x < outW; ++x)
      for (int k = 0; k < c; ++k) {
        double s = 0;
        for (size_t i = 0; i < ty.w[size_t(y)].size(); ++i)
          s += ty.w[size_t(y)][i] * mid[((size_t(ty.first[size_t(y)]) + i) * outW + x) * c + k];
        out[(size_t(y) * outW + x) * c + k] = float(s);
      }
  return out;
}

std::vector<uint8_t> to_u8(const std::vector<float>& v) {
  std::vector<uint8_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = uint8_t(std::clamp(std::nearbyint(v[i]), 0.0f, 255.0f));
  return o;
}

// Separable Gaussian (sigma pixels, radius ceil(3 sigma)), edges clamped.
std::vector<float> gaussian_blur(const std::vector<float>& src, int W, int H, double sigma) {
  const int r = int(std::ceil(3 * sigma));
  std::vector<double> k(size_t(2 * r + 1));
  double sum = 0;
  for (int i = -r; i <= r; ++i) sum += k[size_t(i + r)] = std::exp(-0.5 * i * i / (sigma * sigma));
  for (double& v : k) v /= sum;
  std::vector<float> mid(src.size()), out(src.size());
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      double s = 0;
      for (int i = -r; i <= r; ++i) s += k[size_t(i + r)] * src[size_t(y) * W + size_t(std::clamp(x + i, 0, W - 1))];
      mid[size_t(y) * W + x] = float(s);
    }
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      double s = 0;
      for (int i = -r; i <= r; ++i) s += k[size_t(i + r)] * mid[size_t(std::clamp(y + i, 0, H - 1)) * W + x];
      out[size_t(y) * W + x] = float(s);
    }
  return out;
}

}  // namespace

int img2img_start_step(int steps, float strength) {
  // init_timestep = min(num_inference_steps * strength, num_inference_steps); t_start = int(max(N - it, 0)),
  // in Python's doubles on the number the user wrote: the float's shortest decimal (0.6f -> 0.6, whose
  // 5 * 0.6 is 3.0, where 5 * double(0.6f) is 3.0000000447 and would start a step earlier).
  const double s = std::strtod(shortest_decimal(strength).c_str(), nullptr);
  const double init = std::min(double(steps) * s, double(steps));
  return int(std::max(double(steps) - init, 0.0));
}

void check_image(const Image& img, const char* what) {
  ERNIE_CHECK(img.width > 0 && img.height > 0, what, ": the image is empty (", to_string(img.width), "x",
              to_string(img.height), ")");
  const size_t n = size_t(img.width) * size_t(img.height);
  ERNIE_CHECK(img.rgb.size() == n * 3, what, ": ", to_string(img.rgb.size()), " bytes of RGB for a ",
              to_string(img.width), "x", to_string(img.height), " image (", to_string(n * 3), " expected)");
  ERNIE_CHECK(img.alpha.empty() || img.alpha.size() == n, what, ": ", to_string(img.alpha.size()),
              " bytes of alpha for ", to_string(n), " pixels");
}

Image resize_image(const Image& img, int width, int height) {
  check_image(img, "resize");
  ERNIE_CHECK(width > 0 && height > 0, "resize: the size ", to_string(width), "x", to_string(height), " is empty");
  if (img.width == width && img.height == height) return img;
  Image out{width, height, {}, {}};
  std::vector<float> rgb(img.rgb.begin(), img.rgb.end());
  out.rgb = to_u8(resample(rgb, img.width, img.height, 3, width, height));
  if (!img.alpha.empty()) {
    std::vector<float> a(img.alpha.begin(), img.alpha.end());
    out.alpha = to_u8(resample(a, img.width, img.height, 1, width, height));
  }
  return out;
}

Tensor image_to_tensor(const Image& img) {
  check_image(img, "image");
  const int64_t H = img.height, W = img.width, HW = H * W;
  Tensor t = Tensor::empty({1, 3, H, W}, DType::F32);
  float* p = t.f32();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < HW; ++i) p[c * HW + i] = 2.0f * (float(img.rgb[size_t(i * 3 + c)]) / 255.0f) - 1.0f;
  return t;
}

std::vector<float> mask_weights(const Image& mask, int blur) {
  check_image(mask, "mask");
  ERNIE_CHECK(blur >= 0 && blur <= kMaxMaskBlur, "mask blur ", to_string(blur), " is out of range [0, ",
              to_string(kMaxMaskBlur), "] pixels");
  const size_t n = size_t(mask.width) * size_t(mask.height);
  const bool transparency = std::any_of(mask.alpha.begin(), mask.alpha.end(), [](uint8_t a) { return a < 255; });
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) {
    if (transparency) {
      w[i] = 1.0f - float(mask.alpha[i]) / 255.0f;
    } else {  // PIL's convert("L"): (R 19595 + G 38470 + B 7471 + 0x8000) >> 16
      const uint32_t L = (uint32_t(mask.rgb[i * 3]) * 19595 + uint32_t(mask.rgb[i * 3 + 1]) * 38470 +
                          uint32_t(mask.rgb[i * 3 + 2]) * 7471 + 0x8000) >> 16;
      w[i] = float(L) / 255.0f;
    }
  }
  return blur > 0 ? gaussian_blur(w, mask.width, mask.height, double(blur)) : w;
}

Tensor latent_mask(const std::vector<float>& weights, int W, int H, int64_t B, int64_t C, int64_t h, int64_t w) {
  ERNIE_CHECK(weights.size() == size_t(W) * size_t(H) && h > 0 && w > 0, "latent_mask: ", to_string(weights.size()),
              " weights for a ", to_string(W), "x", to_string(H), " mask");
  Tensor t = Tensor::empty({B, C, h, w}, DType::F32);
  float* p = t.f32();
  const float sy = float(H) / float(h), sx = float(W) / float(w);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const int64_t iy = std::min(int64_t(std::floor(float(y) * sy)), int64_t(H) - 1);
      const int64_t ix = std::min(int64_t(std::floor(float(x) * sx)), int64_t(W) - 1);
      const float m = weights[size_t(iy * W + ix)] >= 0.5f ? 1.0f : 0.0f;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) p[((b * C + c) * h + y) * w + x] = m;
    }
  return t;
}

void composite_over(const Image& original, const std::vector<float>& weights, float* image_f32,
                    std::vector<uint8_t>& rgb) {
  const size_t n = size_t(original.width) * size_t(original.height);
  ERNIE_CHECK(weights.size() == n && rgb.size() == n * 3 && original.rgb.size() == n * 3,
              "composite: the mask, the original and the result differ in size");
  for (size_t i = 0; i < n; ++i)
    for (size_t c = 0; c < 3; ++c) {
      const float m = std::clamp(weights[i], 0.0f, 1.0f);
      float& v = image_f32[i * 3 + c];
      v = m * v + (1.0f - m) * (float(original.rgb[i * 3 + c]) / 255.0f);
      rgb[i * 3 + c] = uint8_t(std::nearbyint(std::clamp(v, 0.0f, 1.0f) * 255.0f));
    }
}

}  // namespace ernie
