// The recipe by card size that doctor advises for a GPU: the weights format, offload mode and flags that fit
// its memory, with the peak and seconds per step measured for it (bench/BENCHMARKS.md, "cards": --max-vram on
// the H200 standing in for each size, 1024², random full-size weights). fp8 needs fp8 tensor cores (compute
// capability 8.9); older GPUs get the int8 / GGUF recipe of their size instead.
#pragma once
#include <string>

namespace ernie {

struct CardRecipe {
  int card_gib = 0;       // the card size the recipe is for (8, 12, 16, 24)
  std::string recipe;     // what to run
  double peak_gib = 0;    // measured peak GPU memory
  double turbo_step_s = 0, cfg4_step_s = 0;  // measured seconds per step: Turbo (cfg 1), the 50-step model (cfg 4)
};

// The recipe for a GPU with `total_gib` of memory and compute capability `cc` (major * 10 + minor): the
// largest card size it holds. A GPU under 8 GiB gets the 8 GB recipe with its card_gib 0 (it may not fit).
CardRecipe card_recipe(double total_gib, int cc);
std::string describe(const CardRecipe& r);

}  // namespace ernie
