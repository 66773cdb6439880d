// Quantization to GGML block types, for `convert -o x.gguf`: the encoders of the formats core/ggml_blocks.h
// decodes (Q8_0, Q4_K, Q5_K, Q6_K). Straightforward, not ggml's search: each sub-block's range (min and max,
// or max |x|) sets its scale, and the scales are quantized against the block's largest. A round trip through
// the decoders is within half a quantization step of each sub-block (tests/test_gguf_write.cpp).
#pragma once
#include <cstdint>
#include <string>

namespace ernie {

// The GGML type id of a `convert --dtype` name for GGUF output: q8_0 q4_k q5_k q6_k bf16 f16 f32; -1 if none.
int ggml_output_type(const std::string& name);

// Encodes n floats (a multiple of the type's block) at x into the type's blocks at out (n / block · bytes
// bytes). `type` is one of the ids ggml_output_type returns that is block-quantized (Q8_0, Q4_K, Q5_K, Q6_K).
void ggml_encode(int type, const float* x, int64_t n, uint8_t* out);

}  // namespace ernie
