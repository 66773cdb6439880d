// libpng with setjmp error handling kept inside small C-style functions that hold no C++ objects with
// destructors (a longjmp must not skip them); the C++ wrappers turn failures into ernie::Error.
#include "io/png.h"

#include <png.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file.h"
#include "io/image_limits.h"

namespace ernie {
namespace {

struct Status {
  char msg[256] = {0};
};

void on_error(png_structp png, png_const_charp m) {
  auto* s = static_cast<Status*>(png_get_error_ptr(png));
  std::snprintf(s->msg, sizeof s->msg, "%s", m ? m : "libpng error");
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}

// ---- write ------------------------------------------------------------------------------------------
struct Sink {
  std::vector<uint8_t>* out;
  bool failed;
};
void sink_write(png_structp png, png_bytep data, png_size_t n) {
  auto* s = static_cast<Sink*>(png_get_io_ptr(png));
  try {
    s->out->insert(s->out->end(), data, data + n);
  } catch (...) {
    s->failed = true;
    png_error(png, "out of memory");
  }
}
void sink_flush(png_structp) {}

// `px`: rows of `channels` (3: RGB, 4: RGBA) bytes per pixel.
bool encode_c(int w, int h, const uint8_t* px, int channels, png_text* texts, int ntext, Sink* sink, Status* st) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, st, on_error, on_warning);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, info ? &info : nullptr);
    return false;
  }
  png_set_write_fn(png, sink, sink_write, sink_flush);
  png_set_IHDR(png, info, png_uint_32(w), png_uint_32(h), 8, channels == 4 ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (ntext > 0) png_set_text(png, info, texts, ntext);
  png_write_info(png, info);
  for (int y = 0; y < h; ++y) png_write_row(png, const_cast<png_bytep>(px + size_t(y) * size_t(w) * size_t(channels)));
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return true;
}

// ---- read ---------------------------------------------------------------------------------------------
struct Source {
  const uint8_t* data;
  size_t size, pos;
};
void source_read(png_structp png, png_bytep out, png_size_t n) {
  auto* s = static_cast<Source*>(png_get_io_ptr(png));
  if (n > s->size - s->pos) png_error(png, "truncated PNG data");
  std::memcpy(out, s->data + s->pos, n);
  s->pos += n;
}

struct Decoded {
  int w = 0, h = 0;
  uint8_t* rgb = nullptr;  // malloc'd, w*h*4 (RGBA; opaque filler when the file has no alpha)
  bool has_alpha = false;   // the file has an alpha channel or a tRNS transparency
  png_bytep* rows = nullptr;  // malloc'd row pointers while reading (here, not a local: it must survive a longjmp)
  int ntext = 0;
  char** keys = nullptr;   // malloc'd copies
  char** values = nullptr;
};

void free_decoded(Decoded* d) {
  std::free(d->rgb);
  std::free(d->rows);
  for (int i = 0; i < d->ntext; ++i) {
    std::free(d->keys[i]);
    std::free(d->values[i]);
  }
  std::free(d->keys);
  std::free(d->values);
  *d = Decoded{};
}

constexpr png_uint_32 kMaxSide = kMaxImageSide;
// Chunks other than IDAT are read whole into one buffer (and zTXt/iTXt/iCCP inflated into another), at most
// kMaxChunkCache of them kept: their memory stays within 16 x 4 MiB, well below the pixels'.
constexpr uint32_t kMaxChunk = 4u << 20;
constexpr int kMaxChunkCache = 16;

bool decode_c(Source* src, Decoded* d, Status* st) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, st, on_error, on_warning);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    free_decoded(d);
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return false;
  }
  png_set_read_fn(png, src, source_read);
  png_set_chunk_malloc_max(png, kMaxChunk);
  png_set_chunk_cache_max(png, kMaxChunkCache);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w == 0 || h == 0 || w > kMaxSide || h > kMaxSide || uint64_t(w) * h > kMaxImagePixels)
    png_error(png, "image size out of range (at most 32768 per side and 64 megapixels)");
  int color = png_get_color_type(png, info);
  d->has_alpha = (color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS);
  if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  png_set_filler(png, 0xff, PNG_FILLER_AFTER);  // RGBA throughout; no-op when alpha is already there
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != size_t(w) * 4) png_error(png, "unsupported pixel format");
  d->w = int(w);
  d->h = int(h);
  d->rgb = static_cast<uint8_t*>(std::malloc(size_t(w) * h * 4));
  d->rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * h));
  if (!d->rgb || !d->rows) png_error(png, "out of memory");
  for (png_uint_32 y = 0; y < h; ++y) d->rows[y] = d->rgb + size_t(y) * w * 4;
  png_read_image(png, d->rows);
  png_read_end(png, info);
  std::free(d->rows);
  d->rows = nullptr;
  png_textp text = nullptr;
  int n = png_get_text(png, info, &text, nullptr);
  if (n > 0) {
    d->keys = static_cast<char**>(std::calloc(size_t(n), sizeof(char*)));
    d->values = static_cast<char**>(std::calloc(size_t(n), sizeof(char*)));
    if (!d->keys || !d->values) png_error(png, "out of memory");
    for (int i = 0; i < n; ++i) {
      size_t len = text[i].compression > 0 ? text[i].itxt_length : text[i].text_length;
      d->keys[i] = strdup(text[i].key);
      d->values[i] = static_cast<char*>(std::malloc(len + 1));
      d->ntext = i + 1;
      if (!d->keys[i] || !d->values[i]) png_error(png, "out of memory");
      if (len) std::memcpy(d->values[i], text[i].text, len);
      d->values[i][len] = 0;
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

bool is_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

}  // namespace

std::vector<uint8_t> encode_png(int width, int height, const std::vector<uint8_t>& rgb,
                                const std::vector<std::pair<std::string, std::string>>& text,
                                const std::vector<uint8_t>& alpha) {
  ERNIE_CHECK(width > 0 && height > 0 && width <= int(kMaxSide) && height <= int(kMaxSide), "png: image size ",
              std::to_string(width), "x", std::to_string(height), " out of range");
  ERNIE_CHECK(rgb.size() == size_t(width) * size_t(height) * 3, "png: pixel buffer holds ", std::to_string(rgb.size()),
              " bytes, expected ", std::to_string(size_t(width) * height * 3));
  ERNIE_CHECK(alpha.empty() || alpha.size() == size_t(width) * size_t(height), "png: alpha buffer holds ",
              std::to_string(alpha.size()), " bytes, expected ", std::to_string(size_t(width) * height));
  std::vector<uint8_t> rgba;  // with alpha: the pixels interleaved as RGBA
  if (!alpha.empty()) {
    rgba.resize(alpha.size() * 4);
    for (size_t i = 0; i < alpha.size(); ++i) {
      std::memcpy(&rgba[i * 4], &rgb[i * 3], 3);
      rgba[i * 4 + 3] = alpha[i];
    }
  }
  std::vector<png_text> texts(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto& [k, v] = text[i];
    ERNIE_CHECK(!k.empty() && k.size() <= 79 && is_ascii(k), "png: invalid text keyword '", k, "'");
    png_text& t = texts[i];
    std::memset(&t, 0, sizeof t);
    t.key = const_cast<char*>(k.c_str());
    t.text = const_cast<char*>(v.c_str());
    if (is_ascii(v)) {
      t.compression = PNG_TEXT_COMPRESSION_NONE;
      t.text_length = v.size();
    } else {  // UTF-8 needs iTXt
      t.compression = PNG_ITXT_COMPRESSION_NONE;
      t.itxt_length = v.size();
      t.lang = const_cast<char*>("");
      t.lang_key = const_cast<char*>("");
    }
  }
  std::vector<uint8_t> out;
  Sink sink{&out, false};
  Status st;
  const bool has_alpha = !alpha.empty();
  if (!encode_c(width, height, has_alpha ? rgba.data() : rgb.data(), has_alpha ? 4 : 3, texts.data(), int(texts.size()),
                &sink, &st)) {
    if (sink.failed) throw std::bad_alloc();
    fail("png: encoding failed: ", st.msg);
  }
  return out;
}

void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb,
               const std::vector<std::pair<std::string, std::string>>& text, const std::vector<std::string>& inputs) {
  std::vector<uint8_t> bytes = encode_png(width, height, rgb, text);
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), inputs);
}

namespace {

// libpng allocates and zeroes a buffer of a chunk's declared length before it reads the chunk, so a 73-byte
// file declaring a 2 GB tEXt chunk cost 2 GB (issue 21). The chunk lengths are checked here first, against
// the bytes really there and, but for IDAT (which libpng streams), against kMaxChunk.
void check_chunk_lengths(const std::vector<uint8_t>& b, const std::string& what) {
  for (size_t pos = 8; pos < b.size();) {  // length, type, data, CRC
    ERNIE_CHECK(pos + 12 <= b.size(), what, ": corrupt PNG (the file ends inside the chunk at byte ",
                std::to_string(pos), ")");
    const uint32_t len = png_get_uint_32(&b[pos]);
    std::string type(b.begin() + long(pos) + 4, b.begin() + long(pos) + 8);
    for (char& c : type)
      if (!std::isalpha(static_cast<unsigned char>(c))) c = '?';
    const size_t left = b.size() - pos - 12;
    ERNIE_CHECK(len <= left, what, ": corrupt PNG (chunk '", type, "' at byte ", std::to_string(pos), " declares ",
                std::to_string(len), " bytes of data, the file has ", std::to_string(left), " left)");
    ERNIE_CHECK(type == "IDAT" || len <= kMaxChunk, what, ": PNG chunk '", type, "' holds ", std::to_string(len),
                " bytes (at most 4 MiB outside the image data)");
    if (type == "IEND") return;
    pos += 12 + len;
  }
}

}  // namespace

PngImage decode_png(const std::vector<uint8_t>& bytes, const std::string& what) {
  ERNIE_CHECK(bytes.size() >= 8 && png_sig_cmp(bytes.data(), 0, 8) == 0, what, ": not a PNG file");
  check_chunk_lengths(bytes, what);
  Source src{bytes.data(), bytes.size(), 0};
  Decoded d;
  Status st;
  if (!decode_c(&src, &d, &st)) fail(what, ": corrupt PNG (", st.msg, ")");
  PngImage img;
  img.width = d.w;
  img.height = d.h;
  const size_t n = size_t(d.w) * d.h;
  img.rgb.resize(n * 3);
  if (d.has_alpha) img.alpha.resize(n);
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) img.rgb[i * 3 + c] = d.rgb[i * 4 + c];
    if (d.has_alpha) img.alpha[i] = d.rgb[i * 4 + 3];
  }
  for (int i = 0; i < d.ntext; ++i) img.text[d.keys[i]] = d.values[i];
  free_decoded(&d);
  return img;
}

PngImage read_png(const std::string& path) {
  const std::string data = read_regular_file(path, size_t(1) << 30);
  return decode_png(std::vector<uint8_t>(data.begin(), data.end()), path);
}

}  // namespace ernie
