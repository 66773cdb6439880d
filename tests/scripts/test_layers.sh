#!/usr/bin/env bash
# The layer rules of docs/DESIGN.md ("Layers"): each rule is a grep of include paths that prints nothing when it
# holds. Fails printing every offending line. Args (from CTest, unused): <ernie-image binary> <tests/data>
set -uo pipefail
cd "$(dirname "$0")/../.."
fail=0
rule() {  # rule <name> <offending lines...>
  local name=$1 out=$2
  if [ -n "$out" ]; then echo "layer rule broken: $name"; echo "$out" | sed 's/^/  /'; fail=1; fi
}
inc() { grep -rn --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' "$@" || true; }

rule "backends (ops/<backend>/) are included only inside src/ops/ (tests may)" \
  "$(inc '#include "ops/\(cpu\|cuda\)/' src tools | grep -v '^src/ops/')"
rule "no CUDA #ifdef above ops/" \
  "$(inc 'ERNIE_HAVE_CUDA' src tools | grep -v '^src/ops/\|^src/core/system_info.cpp')"
rule "core/ includes nothing above it" \
  "$(inc '#include "\(ops\|text\|io\|models\|engine\|convert\|doctor\|server\|api\)/' src/core)"
rule "ops/ includes core/ only" \
  "$(inc '#include "\(text\|io\|models\|engine\|convert\|doctor\|server\|api\)/' src/ops)"
rule "text/ includes ops/ and core/" \
  "$(inc '#include "\(io\|models\|engine\|convert\|doctor\|server\|api\)/' src/text)"
rule "io/ includes text/, ops/, core/" \
  "$(inc '#include "\(models\|engine\|convert\|doctor\|server\|api\)/' src/io)"
rule "models/ includes io/ and below" \
  "$(inc '#include "\(engine\|convert\|doctor\|server\|api\)/' src/models)"
rule "engine/ includes models/ and below (not convert/, doctor/, server/, api/)" \
  "$(inc '#include "\(convert\|doctor\|server\|api\)/' src/engine)"
rule "convert/ and doctor/ include engine/ and below" \
  "$(inc '#include "\(server\|api\)/' src/convert src/doctor 2>/dev/null)"

# tools/ reach the library through the engine (engine/, convert/, doctor/, server/, core/, the C API), except
# these file:header pairs, which have no engine call yet. One line each: file, header, reason.
allowed=(
  "tools/ernie-image/main.cpp ops/ops.h"                       # --threads and the backend's name before any engine
  "tools/ernie-image/cmd_tokenize.cpp text/tokenizer.h"        # tokenize: the tokenizer alone, no model loaded
  "tools/ernie-image/cmd_tokenize.cpp io/gguf.h"                # tokenize: a text-encoder GGUF's header alone
  "tools/ernie-image/cmd_tokenize.cpp io/gguf_tokenizer.h"      # tokenize: the tokenizer that GGUF embeds
  "tools/ernie-image/cmd_encode.cpp io/safetensors.h"          # encode --out: writes the embeddings file
  "tools/ernie-image/cmd_generate.cpp io/safetensors.h"        # --save-latents
  "tools/ernie-image/generate_util.cpp io/safetensors.h"       # reads --latents
  "tools/ernie-image/cmd_convert.cpp io/gguf_encode.h"         # --type names of the GGUF encoder
  "tools/ernie-image/cmd_random_model.cpp models/random_folder.h"  # writes a random tiny model (tests, CI)
  "tools/ernie-image/cmd_enhance.cpp io/model_folder.h"        # enhance: the prompt enhancer alone
  "tools/ernie-image/cmd_enhance.cpp models/prompt_enhancer.h"
  "tools/ernie-image/cmd_enhance.cpp ops/ops.h"
  "tools/ernie-image/cmd_bench_pe.cpp io/configs.h"            # bench-pe: the prompt enhancer alone
  "tools/ernie-image/cmd_bench_pe.cpp io/model_folder.h"
  "tools/ernie-image/cmd_bench_pe.cpp models/prompt_enhancer.h"
  "tools/ernie-image/cmd_bench_pe.cpp ops/ops.h"
)
tools_out=""
while IFS= read -r line; do
  [ -z "$line" ] && continue
  file=${line%%:*}
  hdr=$(sed 's/.*#include "\([^"]*\)".*/\1/' <<<"$line")
  ok=0
  for a in "${allowed[@]}"; do [ "$a" = "$file $hdr" ] && ok=1; done
  [ $ok = 0 ] && tools_out+="$line"$'\n'
done < <(inc '#include "\(ops\|text\|io\|models\)/' tools)
rule "tools/ go through the engine where an engine call exists (see the allowed list)" "${tools_out%$'\n'}"

if [ $fail = 0 ]; then echo "layer rules: ok"; fi
exit $fail
