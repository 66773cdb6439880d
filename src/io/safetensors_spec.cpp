#include "io/safetensors_spec.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace ernie {

namespace {
std::string q(const std::string& name) { return "'" + name + "'"; }
}  // namespace

std::vector<std::string> safetensors_spec_problems(const SafeTensorsFile& f) {
  std::vector<std::string> out;
  const std::string at = f.path() + ": ";
  const size_t n = f.header_size();
  const uint8_t* header = f.data_section() - n;
  if (n == 0 || header[0] != '{')
    out.push_back(at +
                  "the JSON header does not start with '{' (the reference library refuses it: invalid header start)");
  if (n % 8 != 0)
    out.push_back(at + "header length " + std::to_string(n) +
                  " is not a multiple of 8 (the reference writer always pads it so; some readers assume it)");

  // The reference reader's rule: sorted by (begin, end), each span begins where the previous one ended.
  std::vector<const TensorInfo*> spans;
  for (const TensorInfo& t : f.tensors()) spans.push_back(&t);
  std::sort(spans.begin(), spans.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  size_t gaps = 0, gap_bytes = 0, overlaps = 0, expected = 0;
  std::string first_gap, first_overlap;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : spans) {
    if (t->begin > expected) {
      if (gaps++ == 0)
        first_gap = prev ? q(prev->name) + " ends at " + std::to_string(expected) + ", " + q(t->name) + " begins at " +
                               std::to_string(t->begin)
                         : "the first tensor, " + q(t->name) + ", begins at " + std::to_string(t->begin) + ", not 0";
      gap_bytes += t->begin - expected;
    } else if (t->begin < expected) {
      if (overlaps++ == 0)
        first_overlap = q(t->name) + " begins at " + std::to_string(t->begin) + ", inside " + q(prev->name) +
                        " (which ends at " + std::to_string(expected) + ")";
    }
    if (t->end >= expected) expected = t->end, prev = t;
  }
  const std::string refused = ": the reference safetensors library refuses the file (invalid offset for tensor)";
  if (gaps)
    out.push_back(at + std::to_string(gaps) + " gap(s) between tensor spans, " + std::to_string(gap_bytes) +
                  " bytes in all (first: " + first_gap + ")" + refused +
                  "; a file converted by an older ernie-image? convert it again");
  if (overlaps)
    out.push_back(at + std::to_string(overlaps) + " tensor span(s) overlap the one before (first: " + first_overlap +
                  ")" + refused);
  const size_t data_size = f.file_size() - 8 - n;
  if (expected < data_size)
    out.push_back(at + "the data section holds " + std::to_string(data_size - expected) +
                  " byte(s) after the last tensor's data: the reference safetensors library refuses the file "
                  "(the data must end exactly at the end of the file)");
  return out;
}

std::vector<size_t> safetensors_data_layout(const std::vector<LayoutItem>& items, size_t align) {
  ERNIE_CHECK(align >= 8 && align <= 4096 && (align & (align - 1)) == 0, "safetensors layout: alignment ",
              std::to_string(align), " is not a power of two from 8 to 4096");
  for (const LayoutItem& it : items)
    ERNIE_CHECK(it.elem > 0 && it.elem <= 8 && (it.elem & (it.elem - 1)) == 0, "safetensors layout: tensor '",
                it.name, "' has element size ", std::to_string(it.elem));
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t(0));
  // 0 for the align-sized, then 1, 2, 4, 8 for element sizes 8, 4, 2, 1.
  auto rank = [&](size_t i) { return items[i].bytes % align == 0 ? size_t(0) : 8 / items[i].elem; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const size_t ra = rank(a), rb = rank(b);
    if (ra != rb) return ra < rb;
    return items[a].name < items[b].name;
  });
  std::vector<size_t> offs(items.size());
  size_t off = 0;
  for (size_t i : order) {
    offs[i] = off;
    off += items[i].bytes;
  }
  return offs;
}

}  // namespace ernie
