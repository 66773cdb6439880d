// A model folder in the released diffusers layout with random BF16 weights (random_weights.h's rules):
// configs, sharded safetensors with their index.json like the release, tokenizer files copied from a given
// folder. For measuring convert and load at full size without the checkpoint; the defaults are the
// released sizes (the config structs' defaults, as `bench --random` builds them).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "io/configs.h"

namespace ernie {

struct RandomFolderOptions {
  DitConfig dit;
  MistralConfig text_encoder;
  VaeConfig vae;
  std::optional<MistralConfig> pe;  // the prompt enhancer (pe/ + pe_tokenizer/), left out when unset
  // A model folder whose small files are copied: tokenizer/ and scheduler/ (with pe: pe_tokenizer/ and
  // pe/generation_config.json), e.g. the tiny test fixture.
  std::string template_dir;
  uint64_t seed = 1;
  size_t shard_bytes = size_t(5) << 30;  // a component larger than this is split into shards + index.json
  int threads = 0;                       // tensors generated and written at once (0: OpenMP's thread count)
};

// The prompt enhancer's released shape (Ministral3ForCausalLM 3B, tied LM head; as `bench-pe --size full`).
MistralConfig full_size_pe_config();

struct RandomFolderStats {
  size_t bytes = 0, tensors = 0, files = 0;  // safetensors files
  double seconds = 0;
};

// Writes the folder `dir` (created; must not exist or be empty). Generation and writing are streamed:
// memory holds at most `threads` tensors. `progress(done, total)` counts tensor bytes of all components.
RandomFolderStats write_random_folder(const std::string& dir, const RandomFolderOptions& opt,
                                      const std::function<void(size_t, size_t)>& progress = {});

// config.json texts in the diffusers / transformers formats that the parsers in configs.h read back.
std::string dit_config_json(const DitConfig& c);
std::string text_encoder_config_json(const MistralConfig& c);  // Mistral3Model, the LM under text_config
std::string pe_config_json(const MistralConfig& c);            // Ministral3ForCausalLM
std::string vae_config_json(const VaeConfig& c);

}  // namespace ernie
