// The one EXIF field we read and write: UserComment (tag 0x9286 in the Exif IFD), where AUTOMATIC1111 keeps the
// generation parameters of its JPEG and WebP files (piexif's layout: big-endian TIFF, IFD0 holding only the Exif
// IFD pointer, the comment as "UNICODE\0" + UTF-16BE).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ernie {

// The TIFF block (no "Exif\0\0" prefix) carrying `utf8` as UserComment.
std::vector<uint8_t> exif_with_user_comment(const std::string& utf8);
// UserComment of a TIFF block (either byte order; a leading "Exif\0\0" is skipped) as UTF-8; none when the
// block has no such tag. Malformed blocks give none, never read out of bounds.
std::optional<std::string> exif_user_comment(const uint8_t* data, size_t size);

}  // namespace ernie
