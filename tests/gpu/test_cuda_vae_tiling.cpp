// Tiled VAE decode/encode on CUDA against the untiled one on the same device (pipeline/vae_tiling.h):
// f32 matches to float rounding (>= 80 dB PSNR), bf16 to >= 40 dB (the bar), on the tiny fixture
// and on the released VAE config with random weights (3x3 tile grids, every resolution), with the step
// activations on the host and on the device.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gpu_util.h"
#include "io/model_folder.h"
#include "models/vae_tiling.h"

namespace ernie::test {
namespace {

using Diff = PsnrDiff;
Diff diff(const Tensor& a, const Tensor& b) { return psnr_diff(a, b); }  // on b's own range

double bar(DType dt) { return dt == DType::F32 ? 80.0 : 40.0; }

void check_decode_and_encode(const Flux2Vae& vae, int64_t h, int64_t w, int tile, const char* what) {
  const Tensor z = rnd({1, vae.config().latent_channels, h, w}, 11);
  const Tensor full = vae.decode(z).to(kCPU).to_f32();
  for (bool on_device : {false, true}) {
    const Diff d = diff(vae_decode_tiled(vae, z, {.tile = tile, .on_device = on_device}), full);
    std::printf("%s %s decode %lldx%lld latent, tile %d, activations on the %s: PSNR %.1f dB, max abs %.2e\n", what,
                dtype_name(vae.act_dtype()), (long long)h, (long long)w, tile, on_device ? "device" : "host", d.psnr,
                d.max_abs);
    EXPECT_GE(d.psnr, bar(vae.act_dtype())) << what << " decode, on_device " << on_device;
  }
  const Tensor img = ops::clamp(vae.decode(z), -1.f, 1.f).to(kCPU).to_f32();
  const Tensor mean = vae.encode(img).first.to(kCPU).to_f32();
  const Diff e = diff(vae_encode_mean_tiled(vae, img, {.tile = tile}), mean);
  std::printf("%s %s encode: PSNR %.1f dB on its range, max abs %.2e\n", what, dtype_name(vae.act_dtype()), e.psnr,
              e.max_abs);
  EXPECT_GE(e.psnr, bar(vae.act_dtype())) << what << " encode";
}

TEST(CudaVaeTiling, TinyFixtureMatchesUntiled) {
  ERNIE_REQUIRE_GPU();
  const ModelFolder m = ModelFolder::open(tiny_model(), false);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    check_decode_and_encode(Flux2Vae::load(m, kGPU, dt), 24, 28, 10, "tiny");
    check_decode_and_encode(Flux2Vae::load(m, kGPU, dt, ops::Layout::NCHW), 24, 28, 10, "tiny, NCHW decoder");
  }
}

// The released sizes (4 blocks, 128-512 channels, 25 GroupNorms in the up path) at 384x448 pixels.
TEST(CudaVaeTiling, ReleasedConfigMatchesUntiled) {
  ERNIE_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    check_decode_and_encode(Flux2Vae::random(VaeConfig{}, kGPU, dt, 3), 48, 56, 20, "released config");
  }
}

}  // namespace
}  // namespace ernie::test
