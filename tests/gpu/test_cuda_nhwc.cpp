// The channels-last (Layout::NHWC) ops of the VAE decoder on CUDA against their CPU twins, in F32 and BF16:
// conv2d through cuDNN (NHWC descriptors, the packed NHWC bias add, fewer than 8 outputs padded) and
// through im2col (ERNIE_CONV=im2col), group_norm with and without SiLU (packed and scalar channel paths,
// many chunks, channel counts wider than a block), nearest 2x upsampling (packed and element paths), and
// the NHWC decoder against the NCHW one.
#include <cstdlib>
#include <string>

#include "gpu_util.h"
#include "io/model_folder.h"
#include "models/flux2_vae.h"
#include "ops/cpu/cpu_ops.h"

namespace ernie::test {
namespace {

using ops::Layout;

TEST(CudaNhwc, Conv2dCudnnAndIm2col) {
  ERNIE_REQUIRE_GPU();
  struct Case {
    Shape x, w;  // x [B, H, W, I], w [O, kh, kw, I]
    int stride, pad;
  };
  const std::vector<Case> cases = {{{2, 17, 19, 8}, {12, 3, 3, 8}, 1, 1},
                                   {{1, 16, 16, 6}, {8, 3, 3, 6}, 2, 0},
                                   {{2, 9, 9, 16}, {4, 1, 1, 16}, 1, 0},
                                   {{1, 20, 24, 16}, {3, 3, 3, 16}, 1, 1},    // fewer than 8 outputs: padded filters
                                   {{1, 32, 32, 64}, {64, 3, 3, 64}, 1, 1},   // packed bias add
                                   {{1, 7, 5, 5}, {7, 3, 3, 5}, 1, 1}};       // odd channels: scalar bias add
  for (const char* mode : {"", "im2col"}) {
    SCOPED_TRACE(std::string("mode ") + mode);
    setenv("ERNIE_CONV", mode, 1);
    FOR_DTYPES {
      for (const Case& c : cases) {
        SCOPED_TRACE("x " + shape_str(c.x) + " w " + shape_str(c.w));
        Tensor x = as_dtype(rnd(c.x, 30), dt), w = as_dtype(rnd(c.w, 31, 0.3f), dt), b = as_dtype(rnd({c.w[0]}, 32), dt);
        const Tensor ref = cpu::conv2d(x, w, b, c.stride, c.pad, Layout::NHWC);
        EXPECT_TRUE(tensors_close(down(ops::conv2d(up(x, dt), up(w, dt), up(b, dt), c.stride, c.pad, Layout::NHWC)), ref,
                                  tol(dt, 1e-5), min_cos(dt)));
        EXPECT_TRUE(tensors_close(down(ops::conv2d(up(x, dt), up(w, dt), {}, c.stride, c.pad, Layout::NHWC)),
                                  cpu::conv2d(x, w, {}, c.stride, c.pad, Layout::NHWC), tol(dt, 1e-5), min_cos(dt)));
      }
    }
  }
  unsetenv("ERNIE_CONV");
}

// The weight conversion on the device equals the host's, and an NHWC conv the NCHW one.
TEST(CudaNhwc, Conv2dMatchesNchwOnDevice) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    Tensor x = as_dtype(rnd({2, 16, 12, 10}, 33), dt), w = as_dtype(rnd({24, 16, 3, 3}, 34, 0.3f), dt);
    Tensor b = as_dtype(rnd({24}, 35), dt);
    const Tensor gx = up(x, dt), gw = up(w, dt), gb = up(b, dt);
    EXPECT_TRUE(tensors_close(down(ops::conv_weight_nhwc(gw)), ops::conv_weight_nhwc(w), 0));
    const Tensor nhwc = ops::conv2d(ops::permute(gx, {0, 2, 3, 1}), ops::conv_weight_nhwc(gw), gb, 1, 1, Layout::NHWC);
    EXPECT_TRUE(tensors_close(down(ops::permute(nhwc, {0, 3, 1, 2})), down(ops::conv2d(gx, gw, gb, 1, 1)), tol(dt, 1e-5),
                              min_cos(dt)));
  }
}

TEST(CudaNhwc, GroupNorm) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    struct Case {
      Shape s;  // [B, H, W, C]
      int groups;
    };
    // Small; the VAE's 32 groups over many chunks; odd channels (scalar path); tokens [B, S, C]; channels wider
    // than a block (the NCHW fallback); one channel per group.
    for (const Case& c : {Case{{2, 5, 7, 8}, 4}, Case{{1, 128, 128, 64}, 32}, Case{{1, 256, 256, 32}, 8},
                          Case{{2, 9, 11, 12}, 3}, Case{{2, 37, 48}, 16}, Case{{1, 3, 3, 9000}, 8},
                          Case{{1, 16, 16, 32}, 32}}) {
      SCOPED_TRACE(shape_str(c.s));
      const int64_t C = c.s.back();
      Tensor x = as_dtype(rnd(c.s, 12, 3.f, 1.5f), dt), w = as_dtype(rnd({C}, 13), dt), b = as_dtype(rnd({C}, 14), dt);
      for (bool silu : {false, true}) {
        EXPECT_TRUE(tensors_close(down(ops::group_norm(up(x, dt), c.groups, up(w, dt), up(b, dt), 1e-6f, silu, Layout::NHWC)),
                                  cpu::group_norm(x, c.groups, w, b, 1e-6f, silu, Layout::NHWC), tol(dt, 5e-5),
                                  min_cos(dt)));
      }
      EXPECT_TRUE(tensors_close(down(ops::group_norm(up(x, dt), c.groups, {}, {}, 1e-5f, false, Layout::NHWC)),
                                cpu::group_norm(x, c.groups, {}, {}, 1e-5f, false, Layout::NHWC), tol(dt, 5e-5),
                                min_cos(dt)));
    }
  }
}

TEST(CudaNhwc, Upsample) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    // Pixels of 16-byte multiples (packed) and not (elements).
    for (const Shape& s : {Shape{2, 4, 5, 8}, Shape{1, 3, 6, 3}, Shape{2, 5, 3, 64}}) {
      Tensor x = as_dtype(rnd(s, 40), dt);
      EXPECT_TRUE(tensors_close(down(ops::upsample_nearest2x(up(x, dt), Layout::NHWC)),
                                cpu::upsample_nearest2x(x, Layout::NHWC), 0));
    }
  }
}

// The released decoder's shapes at a small latent: NHWC against NCHW on the device (same weights). In BF16
// the two round ~30 layers' activations after different accumulation orders (cuDNN's NHWC kernels and the
// NHWC group norm), measured on the H200 at cosine 0.99989, rel L2 0.015; a layout mistake gives cosine ~0.
TEST(CudaNhwc, ReleasedDecoderMatchesNchw) {
  ERNIE_REQUIRE_GPU();
  FOR_DTYPES {
    const Flux2Vae nchw = Flux2Vae::random(VaeConfig{}, kGPU, dt, 3, Layout::NCHW);
    const Flux2Vae nhwc = Flux2Vae::random(VaeConfig{}, kGPU, dt, 3, Layout::NHWC);
    const Tensor z = rnd({1, nchw.config().latent_channels, 16, 12}, 41);
    const Tensor a = down(nhwc.decode(z)), b = down(nchw.decode(z));
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_TRUE(tensors_close(a, b, tol(dt, 1e-4, 3e-2), dt == DType::F32 ? min_cos(dt) : 0.9995));
  }
}

}  // namespace
}  // namespace ernie::test
