// The JSON body of POST /v1/images/generations, /v1/images/edits and /v1/jobs -> a GenerateRequest. OpenAI
// Images fields (prompt, n, size "WxH", response_format b64_json or url, gpt-image-1's output_format png|jpeg|webp
// and output_compression, background auto|opaque, model/user/quality/style/moderation accepted and ignored) plus ours (negative_prompt, steps, guidance_scale, seed, use_pe, sampler, shift, rng, loras, and
// img2img's image, mask as base64 PNG, JPEG or WebP, strength, mask_blur, composite, resize). The multipart body of
// /v1/images/edits (OpenAI's) maps onto the same fields. Type and range errors throw
// ApiException (400) naming the field; model-specific checks (size a multiple of the scale factor, ...)
// are Engine::resolve's.
#pragma once
#include <string>

#include "engine/engine.h"
#include "io/image_codec.h"
#include "server/form_data.h"

namespace ernie::server {

struct ParseLimits {
  int max_images = 8;               // n
  size_t max_prompt_bytes = 16384;  // prompt and negative_prompt, each
  int max_side = 4096;              // pixels, each side of size
  int max_steps = 1000;
  float max_guidance = 100.0f;
  int max_nesting = 16;             // JSON depth
  int64_t max_image_pixels = int64_t(4096) * 4096;  // an init image or mask, read from its PNG header first
};

// gpt-image-1's output_format and output_compression: what the response's b64_json holds.
struct OutputFormat {
  ImageFormat format = ImageFormat::Png;
  int quality = 100;  // JPEG and WebP, 1-100
};

struct ParsedRequest {
  GenerateRequest req;
  bool seed_given = false;  // false: the server picks one
  bool url = false;         // response_format "url": data[].url under /v1/files/ (default b64_json)
  OutputFormat output;      // PNG unless output_format says otherwise (b64_json only)
};

// `require_image`: the edits route, where `image` is required.
ParsedRequest parse_generation_request(const std::string& body, const ParseLimits& lim = {}, bool require_image = false);
// POST /v1/images/edits as multipart/form-data: the text fields as the JSON body's (numbers, booleans and
// `loras` read from their text), the files `image` (or one `image[]`) and `mask` as PNG bytes.
ParsedRequest parse_edit_form(const std::vector<FormPart>& parts, const ParseLimits& lim = {});
// PNG, JPEG or WebP bytes of the request field `field` -> an image (alpha kept for masks); anything else, corrupt,
// truncated, or over lim.max_image_pixels (checked in the header, before decoding) is a 400 naming the field.
Image decode_image_field(const std::string& bytes, const char* field, const ParseLimits& lim);
// A PNG the queue made, in the requested output format; JPEG and WebP keep its A1111 `parameters` in EXIF.
std::string encode_output(const std::string& png, const OutputFormat& o);

// Whether a JSON text nests arrays and objects deeper than max_depth, counted without parsing it (bounded work
// and stack for any body, before the parser sees it).
bool nests_deeper_than(const std::string& body, int max_depth);

// "1024x768" -> (1024, 768); throws ApiException for anything else.
std::pair<int, int> parse_size(const std::string& s, int max_side);

}  // namespace ernie::server
