// The LoRAs a request may use: prompt tags, names in a folder (--lora-dir), file paths, and the adapters they load.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/request.h"
#include "io/configs.h"
#include "models/lora_merge.h"

namespace ernie {

// A1111 / stable-diffusion.cpp prompt tags <lora:NAME> and <lora:NAME:SCALE> (scale 1 when left out): returns the
// prompt without them and appends them to `tags` (name, scale, from_tag) in order. Where a tag stood between two
// spaces one space goes with it, and the result is trimmed, so "a cat <lora:x:0.8>" encodes as "a cat". Throws
// Error on a tag that is not closed, has no name, more than one scale (A1111's separate text-encoder weight:
// this model's text encoder takes no LoRA), or a scale that is not a number.
std::string strip_lora_tags(const std::string& prompt, std::vector<LoraRef>* tags = nullptr);

// The CLI's --lora FILE or FILE:SCALE (the part after the last ':' when it is a number; scale 1 otherwise).
LoraRef parse_lora_flag(const std::string& arg);

// A1111's hash of a LoRA ("Lora hashes" in its metadata): the first 12 hex digits of the SHA-256 of a
// safetensors file's bytes after its header (the "addnet" hash), of the whole file for another format.
std::string lora_short_hash(const std::string& path);

class LoraLibrary {
 public:
  // `dir`: where names are looked up (may be empty: then only paths work). `dit`: the model the adapters are
  // checked against.
  LoraLibrary(std::string dir, DitConfig dit);
  const std::string& dir() const { return dir_; }

  struct Available {
    std::string name;  // file name without ".safetensors"
    uint64_t bytes = 0;
  };
  std::vector<Available> available() const;  // the dir's .safetensors files, by name

  // The explicit refs of `refs` (from_tag false), then the tags of `prompt` (strip_lora_tags): each name looked
  // up in the dir (a name with a path separator or "..", or not there, is an Error listing what is), each path
  // checked, every adapter loaded and checked against the DiT (cached by path, size and time), scales checked;
  // name, path and hash filled in. Idempotent: a resolved list resolves to itself.
  std::vector<LoraRef> resolve(const std::vector<LoraRef>& refs, const std::string& prompt) const;
  // The loaded adapters of a resolved list, with their scales (zero scales left out).
  LoraSet set(const std::vector<LoraRef>& resolved) const;

 private:
  struct Cached {
    uint64_t bytes = 0;
    int64_t mtime = 0;
    std::string hash;
    std::shared_ptr<const LoraAdapter> adapter;
    uint64_t used = 0;  // for evicting the least recently used
  };
  const Cached& load(const std::string& path) const;  // under mu_
  std::string find(const std::string& name) const;   // a name's path in the dir

  std::string dir_;
  DitConfig dit_;
  mutable std::mutex mu_;
  mutable std::map<std::string, Cached> cache_;
  mutable uint64_t clock_ = 0;
};

}  // namespace ernie
