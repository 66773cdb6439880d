#!/usr/bin/env bash
# The tokenize subcommand: ids of a golden case, decode back, stdin input, and clear errors.
# Args: <ernie-image binary> <tests/data>
set -euo pipefail
bin=$1
model=$2/tiny-ernie-image/model
check() { if [ "$2" != "$3" ]; then echo "FAIL $1: got [$2] want [$3]"; exit 1; fi; }

check encode "$("$bin" tokenize --model "$model" --text "a cat")" "[1,84,240,86,84,103]"
check pe "$("$bin" tokenize --model "$model" --component pe_tokenizer --text "a cat" --no-special)" "[84,240,86,84,103]"
check decode "$("$bin" tokenize --model "$model" --decode --text "[1,84,240,86,84,103]")" "<s>a cat"
check skip "$(echo "[1,84,240,86,84,103]" | "$bin" tokenize --model "$model" --decode --skip-special)" "a cat"
check dir "$("$bin" tokenize --model "$model/tokenizer" --text "")" "[1]"
# A llama.cpp GGUF of the same text encoder, alone: its tokenizer.ggml.* gives the folder's ids and text.
gguf=$2/gguf/text_encoder-F16.gguf
check gguf "$("$bin" tokenize --model "$gguf" --text "a cat")" "[1,84,240,86,84,103]"
check gguf-decode "$("$bin" tokenize --model "$gguf" --decode --text "[1,84,240,86,84,103]")" "<s>a cat"
if out=$("$bin" tokenize --model "$2/gguf/dit-Q8_0.gguf" --text a 2>&1); then echo "FAIL: DiT GGUF accepted"; exit 1; fi
case "$out" in *"tokenizer.ggml.model"*) ;; *) echo "FAIL: unclear error: $out"; exit 1 ;; esac
if out=$("$bin" tokenize --model "$model/model_index.json" --text a 2>&1); then echo "FAIL: non-GGUF file accepted"; exit 1; fi
case "$out" in *"not a GGUF file"*) ;; *) echo "FAIL: unclear error: $out"; exit 1 ;; esac
if out=$(printf 'a\xffb' | "$bin" tokenize --model "$model" 2>&1); then echo "FAIL: invalid UTF-8 accepted"; exit 1; fi
case "$out" in *"not valid UTF-8"*) ;; *) echo "FAIL: unclear error: $out"; exit 1 ;; esac
if out=$("$bin" tokenize --model "$model" --decode --text "[1, \"x\"]" 2>&1); then echo "FAIL: bad ids accepted"; exit 1; fi
case "$out" in *"JSON array of integers"*) ;; *) echo "FAIL: unclear error: $out"; exit 1 ;; esac
echo "tokenize CLI: ok"
