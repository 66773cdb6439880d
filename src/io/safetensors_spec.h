// What the reference safetensors library (Python/Rust) requires of a file beyond what our reader accepts, and
// the data layout our writer uses to meet it.
//
// The reference reader sorts the tensors by data_offsets and refuses the file ("invalid offset for tensor")
// unless the spans are contiguous: the first begins at 0, each begins where the previous ends, and the last
// ends exactly at the end of the file. Our reader also accepts gaps (files converted by older versions of
// this program aligned every tensor to 64 bytes and left padding between them); `doctor` warns about them.
#pragma once
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace ernie {

// Human-readable reasons the reference library would refuse `f` (or, for the header length, a convention it
// breaks); empty when the file is spec-clean. Each names the file.
std::vector<std::string> safetensors_spec_problems(const SafeTensorsFile& f);

// The writer's data layout: where each tensor of `bytes` (its byte size) and `elem` (its element size)
// starts in the data section, with the spans contiguous from 0. Tensors whose size is a multiple of `align`
// come first in name order, so each starts at a multiple of `align`; the others follow by decreasing
// element size (then name), so each starts at a multiple of its element size (element sizes are powers of
// two up to 8, `align` a power of two of at least 8). The returned offsets are in input order.
struct LayoutItem {
  std::string name;
  size_t bytes = 0, elem = 1;
};
std::vector<size_t> safetensors_data_layout(const std::vector<LayoutItem>& items, size_t align);

}  // namespace ernie
