// libjpeg with setjmp error handling kept inside small C-style functions that hold no C++ objects with
// destructors (a longjmp must not skip them); the C++ wrappers turn failures into ernie::Error.
#include "io/jpeg.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>

#include "core/error.h"
#include "io/exif.h"
#include "io/image_limits.h"

namespace ernie {
namespace {

constexpr int kMaxScans = 1000;                   // a progressive file of tiny scans is a CPU bomb otherwise
constexpr long kMaxWorkMemory = 512l << 20;       // libjpeg's own buffers (coefficients of progressive files)
constexpr size_t kMaxExifMarker = 65533 - 6;      // an APP1 segment holds at most 65533 bytes, "Exif\0\0" first

struct ErrorMgr {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<ErrorMgr*>(c->err);
  (*c->err->format_message)(c, e->msg);
  std::longjmp(e->jump, 1);
}
// Warnings (premature end of data, corrupt entropy data) would leave gray or garbled pixels: errors here.
void on_message(j_common_ptr c, int level) {
  if (level < 0) on_error(c);
}
void on_progress(j_common_ptr c) {
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > kMaxScans) {
    auto* e = reinterpret_cast<ErrorMgr*>(c->err);
    std::snprintf(e->msg, sizeof e->msg, "more than %d scans", kMaxScans);
    std::longjmp(e->jump, 1);
  }
}

void init_errors(ErrorMgr* e) {
  jpeg_std_error(&e->pub);
  e->pub.error_exit = on_error;
  e->pub.emit_message = on_message;
  e->msg[0] = 0;
}

struct Encoded {
  unsigned char* out = nullptr;  // libjpeg's (malloc'd)
  unsigned long size = 0;
};

bool encode_c(int w, int h, const uint8_t* rgb, const uint8_t* exif, size_t exif_size, int quality, Encoded* o,
              ErrorMgr* err) {
  jpeg_compress_struct c;
  c.err = &err->pub;
  init_errors(err);
  if (setjmp(err->jump)) {
    jpeg_destroy_compress(&c);
    return false;
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &o->out, &o->size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  if (exif_size > 0) jpeg_write_marker(&c, JPEG_APP0 + 1, exif, unsigned(exif_size));
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(rgb + size_t(c.next_scanline) * size_t(w) * 3);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return true;
}

struct Decoded {
  int w = 0, h = 0;
  uint8_t* rgb = nullptr;   // malloc'd, w*h*3
  uint8_t* exif = nullptr;  // malloc'd copy of the first Exif APP1 segment's data
  size_t exif_size = 0;
  bool too_large = false;
};

void free_decoded(Decoded* d) {
  std::free(d->rgb);
  std::free(d->exif);
  d->rgb = d->exif = nullptr;
}

bool decode_c(const uint8_t* data, size_t size, uint64_t max_pixels, Decoded* d, ErrorMgr* err) {
  jpeg_decompress_struct c;
  jpeg_progress_mgr progress;
  c.err = &err->pub;
  init_errors(err);
  if (setjmp(err->jump)) {
    free_decoded(d);
    jpeg_destroy_decompress(&c);
    return false;
  }
  jpeg_create_decompress(&c);
  c.mem->max_memory_to_use = kMaxWorkMemory;
  progress.progress_monitor = on_progress;
  c.progress = &progress;
  jpeg_mem_src(&c, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&c, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&c, TRUE);
  if (!image_size_ok(c.image_width, c.image_height, max_pixels)) {
    d->w = int(c.image_width);
    d->h = int(c.image_height);
    d->too_large = true;
    jpeg_destroy_decompress(&c);
    return false;
  }
  for (jpeg_saved_marker_ptr m = c.marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      d->exif = static_cast<uint8_t*>(std::malloc(m->data_length));
      if (!d->exif) ERREXIT1(&c, JERR_OUT_OF_MEMORY, 0);
      std::memcpy(d->exif, m->data, m->data_length);
      d->exif_size = m->data_length;
      break;
    }
  }
  c.out_color_space = JCS_RGB;
  jpeg_start_decompress(&c);
  if (c.output_components != 3) ERREXIT(&c, JERR_CONVERSION_NOTIMPL);
  d->w = int(c.output_width);
  d->h = int(c.output_height);
  d->rgb = static_cast<uint8_t*>(std::malloc(size_t(d->w) * size_t(d->h) * 3));
  if (!d->rgb) ERREXIT1(&c, JERR_OUT_OF_MEMORY, 1);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = d->rgb + size_t(c.output_scanline) * size_t(d->w) * 3;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return true;
}

}  // namespace

std::vector<uint8_t> encode_jpeg(int width, int height, const std::vector<uint8_t>& rgb, const std::string& parameters,
                                 int quality) {
  ERNIE_CHECK(width > 0 && height > 0 && width <= 65500 && height <= 65500, "jpeg: image size ",
              std::to_string(width), "x", std::to_string(height), " out of range (at most 65500 a side)");
  ERNIE_CHECK(rgb.size() == size_t(width) * size_t(height) * 3, "jpeg: pixel buffer holds ", std::to_string(rgb.size()),
              " bytes, expected ", std::to_string(size_t(width) * height * 3));
  ERNIE_CHECK(quality >= 1 && quality <= 100, "jpeg: quality ", std::to_string(quality), " out of range 1-100");
  std::vector<uint8_t> exif;
  if (!parameters.empty()) {
    const std::vector<uint8_t> tiff = exif_with_user_comment(parameters);
    ERNIE_CHECK(tiff.size() <= kMaxExifMarker, "jpeg: the parameters take ", std::to_string(tiff.size()),
                " bytes of EXIF, more than a JPEG segment holds (", std::to_string(kMaxExifMarker),
                "); write a PNG or a WebP");
    exif.assign({'E', 'x', 'i', 'f', 0, 0});
    exif.insert(exif.end(), tiff.begin(), tiff.end());
  }
  Encoded o;
  ErrorMgr err;
  const bool ok = encode_c(width, height, rgb.data(), exif.data(), exif.size(), quality, &o, &err);
  std::vector<uint8_t> out;
  if (ok) out.assign(o.out, o.out + o.size);
  std::free(o.out);
  if (!ok) fail("jpeg: encoding failed: ", err.msg);
  return out;
}

PngImage decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& what, uint64_t max_pixels) {
  ERNIE_CHECK(bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff, what, ": not a JPEG file");
  Decoded d;
  ErrorMgr err;
  if (!decode_c(bytes.data(), bytes.size(), max_pixels, &d, &err)) {
    if (d.too_large)
      fail(what, ": JPEG: ", image_size_error(uint64_t(d.w), uint64_t(d.h), max_pixels));
    fail(what, ": corrupt JPEG (", err.msg, ")");
  }
  PngImage img;
  img.width = d.w;
  img.height = d.h;
  img.rgb.assign(d.rgb, d.rgb + size_t(d.w) * size_t(d.h) * 3);
  if (d.exif) {
    if (auto comment = exif_user_comment(d.exif, d.exif_size)) img.text["parameters"] = *comment;
  }
  free_decoded(&d);
  return img;
}

}  // namespace ernie
