#include "doctor/card_recipes.h"

#include <cstdio>

namespace ernie {

CardRecipe card_recipe(double total_gib, int cc) {
  const bool fp8 = cc >= 89;
  // 24 GB cards report 23.5-24 GiB, 16 GB ones 15.6-16: a little slack below each size.
  if (total_gib >= 23)
    return fp8 ? CardRecipe{24, "an fp8 file (convert --dtype fp8), resident; the bf16 folder also fits (18.7 GiB, "
                                "0.126 / 0.247 s per step)", 15.4, 0.084, 0.158}
               : CardRecipe{24, "the bf16 folder as downloaded, default flags (the text encoder freed first)", 18.7,
                            0.126, 0.247};
  if (total_gib >= 15)
    return fp8 ? CardRecipe{16, "an fp8 file (convert --dtype fp8), resident", 15.4, 0.084, 0.158}
               : CardRecipe{16, "a Q4_K GGUF DiT (convert -o dit.gguf --dtype q4_k --quantize-all-blocks) with "
                                "--diffusion-model, default flags", 8.3, 0.135, 0.255};
  if (total_gib >= 11)
    return {12, "a Q4_K GGUF DiT (convert -o dit.gguf --dtype q4_k --quantize-all-blocks) with --diffusion-model, "
                "default flags", 8.3, 0.135, 0.255};
  const int size = total_gib >= 7.5 ? 8 : 0;
  return fp8 ? CardRecipe{size, "an fp8 file with --max-vram " + std::to_string(size ? size : 6) +
                                    " (it picks --offload blocks)", 4.9, 0.150, 0.162}
             : CardRecipe{size, "a Q4_K GGUF DiT with --diffusion-model and --offload blocks", 6.6, 0.135, 0.256};
}

std::string describe(const CardRecipe& r) {
  char b[160];
  std::snprintf(b, sizeof b, " (measured: peak %.1f GiB, %.3f s per step Turbo, %.3f s per step at cfg 4)", r.peak_gib,
                r.turbo_step_s, r.cfg4_step_s);
  return (r.card_gib ? std::to_string(r.card_gib) + " GB recipe: " : std::string("below 8 GB, the 8 GB recipe may not fit: ")) +
         r.recipe + b;
}

}  // namespace ernie
