// A llama.cpp LLM GGUF (general.architecture "llama" or "mistral3", as llama.cpp's convert_hf_to_gguf.py writes
// Mistral / Ministral-3 models) read as the transformers causal LM the Mistral code expects: its hyper-parameters
// as a MistralConfig, its tensors under the HF names with llama.cpp's q/k row permutation undone.
#pragma once
#include <memory>
#include <string>

#include "io/configs.h"
#include "io/gguf.h"
#include "io/model_folder.h"

namespace ernie {

// The architecture of an LLM GGUF: "llama" or "mistral3". Anything else is an Error naming the file: a
// diffusion-model GGUF (wan, ernie_image, flux..., or no general.architecture with no token_embd.weight) says
// that it is a DiT where a text encoder LLM is expected.
std::string gguf_llm_arch(const GgufFile& f);

// The config from `<arch>.embedding_length`, `.block_count`, `.feed_forward_length`, `.attention.head_count`,
// `.attention.layer_norm_rms_epsilon` (required; a missing one is an Error naming the key), `.attention.head_count_kv`
// (default head_count), `.attention.key_length` (default embedding/heads; `.attention.value_length` and
// `.rope.dimension_count` must equal it), `.rope.freq_base` (default 10000), `.context_length`, rope scaling
// (`.rope.scaling.type` none/yarn, `.rope.scaling.factor`, `.rope.scaling.original_context_length`,
// `.rope.scaling.yarn_beta_fast`/`_slow`, `.rope.scaling.yarn_log_multiplier` = mscale_all_dim), the llama-4 query
// scale `.attention.temperature_scale` (mistral3's llama_4_scaling_beta), the vocabulary size from token_embd's
// rows, tie_word_embeddings when there is no output.weight, and bos/eos/pad ids from `tokenizer.ggml.*`.
// Validated exactly as parse_mistral_config validates a config.json (the same checks and limits).
// YaRN without yarn_log_multiplier: mscale = mscale_all_dim = 1 (attention factor 1, what Ministral-3's
// config.json holds). llama.cpp instead applies 1 + 0.1 ln(factor) then; its own converter always writes the key
// for Ministral-3, so the two agree on every file it makes.
MistralConfig gguf_mistral_config(const GgufFile& f);
// The same from a parsed header (the fuzzer); errors name `where`.
MistralConfig gguf_mistral_config(const GgufHeader& h, const std::string& where);

// The inverse of llama.cpp's converter permutation of q/k rows for `n_head` heads (k: n_head_kv). The converter
// stores row h*D + 2*j + i (D = head_dim, j < D/2, i < 2) what HF has at row h*D + i*D/2 + j, i.e.
// reshape(n_head, 2, D/2, in).swapaxes(1, 2); this copies the rows back. `w` is [n_head*D, in], any dtype, on the
// host; the result is a new tensor of the same dtype and shape.
Tensor gguf_unpermute_qk(const Tensor& w, int n_head);
// The converter's permutation itself (for tests and tools).
Tensor gguf_permute_qk(const Tensor& w, int n_head);

// `f`'s tensors under the transformers causal-LM names: model.embed_tokens.weight (token_embd),
// model.layers.N.{input_layernorm (attn_norm), self_attn.{q,k,v,o}_proj (attn_q/k/v/output),
// post_attention_layernorm (ffn_norm), mlp.{gate,up,down}_proj (ffn_gate/up/down)}.weight, model.norm.weight
// (output_norm), lm_head.weight (output, when the file has it). q_proj and k_proj come un-permuted (a copy);
// the others are GgufFile::tensor's (zero-copy views for F32/F16/BF16, de-quantized F32 for block types).
// Every tensor of the file must map (an Error names any other, e.g. rope_freqs or MoE experts) and every
// layer's tensors must be present. The TensorInfo of each keeps the GGUF tensor's dtype, shape, ggml_type and
// its byte span in the GGUF's data section (begin/end, `file` = the GGUF path): for q/k the bytes stored there
// are the permuted rows, so the span counts the stored size, not the layout tensor() returns.
std::shared_ptr<TensorFile> gguf_llm_as_hf(std::shared_ptr<GgufFile> f, const MistralConfig& c);

// A text-encoder or prompt-enhancer Component over a GGUF LLM, as ModelFolder builds one from a folder: its
// tensors (gguf_llm_as_hf) under prefix "model.", lm_head.weight at the root, the specs of mistral_tensor_specs.
Component gguf_llm_component(std::shared_ptr<GgufFile> f, const MistralConfig& c, const std::string& name,
                             bool with_lm_head);

}  // namespace ernie
