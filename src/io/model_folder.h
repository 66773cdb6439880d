// A released model folder (diffusers layout): model_index.json, component configs, checkpoints, and
// the complete list of tensors each config implies, checked against what is on disk.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/configs.h"
#include "io/checkpoint.h"
#include "io/component_files.h"
#include "io/safetensors.h"

namespace ernie {

struct TensorSpec {
  std::string name;  // without the component prefix
  Shape shape;
  bool required = true;
};

std::vector<TensorSpec> dit_tensor_specs(const DitConfig& c);
// Names relative to the language model ("embed_tokens.weight", "layers.0...", "norm.weight").
// `layers` limits the list to the layers a forward needs (the text encoder stops at hidden_states[-2]).
std::vector<TensorSpec> mistral_tensor_specs(const MistralConfig& c, bool with_lm_head);
std::vector<TensorSpec> vae_tensor_specs(const VaeConfig& c);

struct Problem {
  std::string component;  // "transformer", "vae", ...
  std::string message;
  bool fatal = true;  // false: a warning (e.g. ignored tensors)
};

struct Component {
  std::string name;    // folder name
  std::string dir;     // absolute folder path (empty inside a converted file)
  std::string root;    // "" in a folder; "transformer/" etc. inside a converted single file
  std::string prefix;  // full tensor-name prefix: root + the model's own ("language_model.model.")
  Checkpoint ckpt;
  std::vector<TensorSpec> specs;
  // A component from a file of its own (--vae ...): that file, and its name layout when not ours ("ldm").
  std::string source, layout;
  // Spec names stored under another name (without prefix), and Linear weights stored as 1x1 convolutions
  // [O, I, 1, 1] (the same bytes; read back as [O, I]).
  std::map<std::string, std::string> renames;
  std::set<std::string> conv_as_linear;
  // The full stored name of a spec name: prefix + its name in the file.
  std::string stored_name(const std::string& name) const;
  size_t params() const;
  size_t stored_bytes() const;  // its tensors' bytes as stored (in a converted file: its share of the file)
  std::string dominant_dtype() const;  // dtype holding most parameters
  // A weight by its name without prefix. Quantized weights (fp8/int8 with "<name>_scale") come back
  // de-quantized to F32 on the host; use quantized() for the raw pair.
  Tensor tensor(const std::string& name) const;
  // {q, scale} when `name` is stored quantized, else {tensor, undefined}.
  std::pair<Tensor, Tensor> quantized(const std::string& name) const;
  // A GGML block-quantized 2-D tensor's stored bytes (TensorFile::stored_blocks) and its TensorInfo; an
  // undefined tensor for any other.
  std::pair<Tensor, const TensorInfo*> stored_blocks(const std::string& name) const;
  bool is_quantized(const std::string& name) const { return ckpt.contains(stored_name(name) + "_scale"); }
  // The static activation scale of an fp8 weight ("<name>_input_scale", F32 [1], from convert --calibrate),
  // checked finite and positive; undefined when there is none.
  Tensor input_scale(const std::string& name) const;
};

class ModelFolder {
 public:
  // Opens configs and checkpoints; throws Error on a missing folder, bad JSON, invalid config or a
  // corrupt checkpoint. Tensor-level problems are listed by check(), not thrown. `files` replace components of
  // `dir`; with `dir` empty they must be complete, and the configs are read off their shapes (component_configs.h).
  static ModelFolder open(const std::string& dir, bool with_pe = true, const ComponentFiles& files = {});
  // The model has a prompt enhancer (pe/), whether or not it was opened with it.
  bool has_prompt_enhancer() const;
  // Every problem: missing, mis-shaped and unexpected tensors, cross-component mismatches.
  std::vector<Problem> check() const;
  // Throws the first fatal problem of `component`, if any (run before using it).
  void require_ok(const std::string& component) const;
  // A small file of the model by its path relative to the model root ("tokenizer/tokenizer.json"),
  // from the folder or from a converted file's metadata. has_file() tells whether it exists.
  std::string read_file(const std::string& rel) const;
  bool has_file(const std::string& rel) const;
  bool is_single_file() const { return file_ != nullptr; }

  std::string root;
  bool turbo = false;  // ERNIE-Image-Turbo (8 steps, cfg 1) vs ERNIE-Image (50 steps, cfg 4)
  DitConfig dit;
  MistralConfig text_encoder;
  VaeConfig vae;
  SchedulerConfig scheduler;
  std::optional<MistralConfig> pe;
  Component transformer_c, text_encoder_c, vae_c;
  std::optional<Component> pe_c;
  // Absolute tokenizer folders of a model folder (empty when absent or inside a converted file, where
  // read_file("tokenizer/tokenizer.json") serves them).
  std::string tokenizer_dir, pe_tokenizer_dir;
  std::string pe_tokenizer_rel;  // "pe_tokenizer" or "pe": where the PE tokenizer files are; empty when absent
  std::string tokenizer_file;    // --tokenizer: the tokenizer.json served as "tokenizer/tokenizer.json"
  // --tokenizer (or --text-encoder) a GGUF: its tokenizer rebuilt, served as "tokenizer/tokenizer.json" and
  // "tokenizer/tokenizer_config.json" from memory.
  std::map<std::string, std::string> tokenizer_texts;
  bool from_files = false;       // no --model: every component from its own file, configs read off their shapes

 private:
  static ModelFolder open_single_file(const std::string& path, bool with_pe);
  static ModelFolder open_checked(const std::string& dir, bool with_pe);  // open() less its filesystem_error net
  static ModelFolder open_files(const ComponentFiles& files);  // no --model
  void use_files(const ComponentFiles& files, bool infer);
  void use_diffusion_model(const std::string& path, bool infer);
  void use_text_encoder(const std::string& path, bool infer);
  void use_vae(const std::string& path, bool infer);
  void use_tokenizer(const std::string& path);
  std::shared_ptr<SafeTensorsFile> file_;  // set for a converted single-file model
};

// Which variant a folder holds: "turbo" in the folder name or in model_index.json's _name_or_path.
bool detect_turbo(const std::string& dir);

}  // namespace ernie
