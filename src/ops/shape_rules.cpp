#include "ops/shape_rules.h"

#include <string>

#include "core/error.h"

namespace ernie::ops::rules {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// outer rows before dim d of s, and bytes per index of d.
void split_rows(RowCopy& r, size_t elem_bytes) {
  r.outer = 1;
  r.inner = int64_t(elem_bytes);
  for (int i = 0; i < r.dim; ++i) r.outer *= r.out_shape[size_t(i)];
  for (size_t i = size_t(r.dim) + 1; i < r.out_shape.size(); ++i) r.inner *= r.out_shape[i];
}

}  // namespace

int norm_dim(int dim, int ndim, const char* op, const Shape& s) {
  ERNIE_CHECK(dim >= -ndim && dim < ndim, op, ": dim ", std::to_string(dim), " out of range for ", shape_str(s));
  return dim < 0 ? dim + ndim : dim;
}

Permute6 permute6(const Tensor& x, const std::vector<int>& dims) {
  const int nd = x.ndim();
  ERNIE_CHECK(int(dims.size()) == nd && nd <= 6, "permute: ", std::to_string(dims.size()), " dims for x ",
              shape_str(x.shape()), " (at most 6)");
  std::array<bool, 6> seen{};
  for (int d : dims) {
    ERNIE_CHECK(d >= 0 && d < nd && !seen[size_t(d)], "permute: dims are not a permutation of 0..",
                std::to_string(nd - 1));
    seen[size_t(d)] = true;
  }
  std::array<int64_t, 6> in_stride{};
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; --i) in_stride[size_t(i)] = s, s *= x.dim(i);
  Permute6 p;
  p.out_shape.resize(size_t(nd));
  for (int i = 0; i < nd; ++i) {
    const size_t k = size_t(6 - nd + i);
    p.out_shape[size_t(i)] = x.dim(dims[size_t(i)]);
    p.out[k] = p.out_shape[size_t(i)];
    p.stride[k] = in_stride[size_t(dims[size_t(i)])];
  }
  return p;
}

RowCopy concat(const std::vector<Tensor>& xs, int dim) {
  ERNIE_CHECK(!xs.empty(), "concat: no tensors");
  const Tensor& x0 = xs[0];
  RowCopy r;
  r.dim = norm_dim(dim, x0.ndim(), "concat", x0.shape());
  const int d = r.dim;
  r.out_shape = x0.shape();
  r.out_shape[size_t(d)] = 0;
  for (const Tensor& t : xs) {
    bool ok = t.ndim() == x0.ndim() && t.dtype() == x0.dtype() && t.device() == x0.device();
    for (int i = 0; ok && i < x0.ndim(); ++i) ok = i == d || t.dim(i) == x0.dim(i);
    ERNIE_CHECK(ok, "concat: ", shape_str(t.shape()), " ", dtype_name(t.dtype()), " on ", t.device().str(),
                " does not match ", shape_str(x0.shape()), " ", dtype_name(x0.dtype()), " on ", x0.device().str(),
                " outside dim ", std::to_string(d));
    r.out_shape[size_t(d)] += t.dim(d);
  }
  split_rows(r, dtype_size(x0.dtype()));
  return r;
}

RowCopy slice(const Tensor& x, int dim, int64_t start, int64_t len) {
  RowCopy r;
  r.dim = norm_dim(dim, x.ndim(), "slice", x.shape());
  const int d = r.dim;
  ERNIE_CHECK(start >= 0 && len >= 0 && start + len <= x.dim(d), "slice: [", str(start), ", ", str(start + len),
              ") outside dim ", std::to_string(d), " of ", shape_str(x.shape()));
  r.out_shape = x.shape();
  r.out_shape[size_t(d)] = len;
  split_rows(r, dtype_size(x.dtype()));
  return r;
}

Shape pad2d(const Tensor& x, int left, int right, int top, int bottom) {
  ERNIE_CHECK(x.ndim() >= 2, "pad2d: x ", shape_str(x.shape()), " needs at least [H, W]");
  ERNIE_CHECK(left >= 0 && right >= 0 && top >= 0 && bottom >= 0, "pad2d: negative padding");
  Shape s = x.shape();
  s[s.size() - 2] = x.dim(-2) + top + bottom;
  s.back() = x.dim(-1) + left + right;
  return s;
}

Shape upsample_nearest2x(const Tensor& x, Layout layout) {
  if (layout == Layout::NHWC) {
    ERNIE_CHECK(x.ndim() == 4, "upsample_nearest2x: x ", shape_str(x.shape()), " is not [B, H, W, C]");
    return {x.dim(0), 2 * x.dim(1), 2 * x.dim(2), x.dim(3)};
  }
  ERNIE_CHECK(x.ndim() >= 2, "upsample_nearest2x: x ", shape_str(x.shape()), " needs at least [H, W]");
  Shape s = x.shape();
  s[s.size() - 2] = 2 * x.dim(-2);
  s.back() = 2 * x.dim(-1);
  return s;
}

Shape conv2d(const Tensor& x, const Tensor& w, int stride, int pad, Layout layout) {
  const bool nhwc = layout == Layout::NHWC;
  ERNIE_CHECK(x.ndim() == 4 && w.ndim() == 4 && x.dim(nhwc ? 3 : 1) == w.dim(nhwc ? 3 : 1), "conv2d: x ",
              shape_str(x.shape()), nhwc ? " [B, H, W, I]" : " [B, I, H, W]", " and weight ", shape_str(w.shape()),
              nhwc ? " [O, kh, kw, I]" : " [O, I, kh, kw]", " do not match");
  ERNIE_CHECK(stride >= 1 && pad >= 0, "conv2d: stride ", std::to_string(stride), " / pad ", std::to_string(pad),
              " invalid");
  const int64_t H = x.dim(nhwc ? 1 : 2), W = x.dim(nhwc ? 2 : 3), kh = w.dim(nhwc ? 1 : 2), kw = w.dim(nhwc ? 2 : 3);
  ERNIE_CHECK(H + 2 * pad >= kh && W + 2 * pad >= kw, "conv2d: kernel ", shape_str(w.shape()),
              " larger than padded input ", shape_str(x.shape()));
  const int64_t Ho = (H + 2 * pad - kh) / stride + 1, Wo = (W + 2 * pad - kw) / stride + 1;
  return nhwc ? Shape{x.dim(0), Ho, Wo, w.dim(0)} : Shape{x.dim(0), w.dim(0), Ho, Wo};
}

void group_norm(const Tensor& x, int groups, Layout layout) {
  ERNIE_CHECK(x.ndim() >= 2, "group_norm: x ", shape_str(x.shape()),
              layout == Layout::NHWC ? " must be [B, ..., C]" : " must be [B, C, ...]");
  const int64_t c = x.dim(layout == Layout::NHWC ? -1 : 1);
  ERNIE_CHECK(groups > 0 && c % groups == 0, "group_norm: ", std::to_string(c), " channels of x ",
              shape_str(x.shape()), " are not divisible into ", std::to_string(groups), " groups");
}

void rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  ERNIE_CHECK(x.ndim() == 4, "rope: x ", shape_str(x.shape()), " must be [B, S, heads, head_dim]");
  const int64_t b = x.dim(0), s = x.dim(1), d = x.dim(3);
  ERNIE_CHECK(d % 2 == 0, "rope: head_dim ", str(d), " of x ", shape_str(x.shape()), " is odd");
  ERNIE_CHECK(cos.shape() == sin.shape(), "rope: cos and sin shapes differ: ", shape_str(cos.shape()), " and ",
              shape_str(sin.shape()));
  ERNIE_CHECK(cos.ndim() == 3 && (cos.dim(0) == b || cos.dim(0) == 1) && cos.dim(1) == s && cos.dim(2) == d,
              "rope: tables ", shape_str(cos.shape()), " must be [", str(b), " or 1, ", str(s), ", ", str(d),
              "] for x ", shape_str(x.shape()));
}

void add_rms_norm(const Tensor& x, const Tensor& y) {
  ERNIE_CHECK(x.ndim() >= 1 && x.shape() == y.shape(), "add_rms_norm: x ", shape_str(x.shape()), " and y ",
              shape_str(y.shape()), " must have one (non-scalar) shape");
}

int64_t qkv_rope(const Tensor& qkv, int64_t heads_q, int64_t heads_kv, const Tensor& cos_q, const Tensor& sin_q,
                 const Tensor& cos_k, const Tensor& sin_k, const Tensor& k_out, const Tensor& v_out) {
  const int64_t slots = heads_q + 2 * heads_kv;
  ERNIE_CHECK(qkv.ndim() == 3 && heads_q > 0 && heads_kv > 0 && qkv.dim(2) % slots == 0 &&
                  (qkv.dim(2) / slots) % 2 == 0,
              "qkv_rope: qkv ", shape_str(qkv.shape()), " is not [B, S, (", str(heads_q), " + 2·", str(heads_kv),
              ") · head_dim] with an even head_dim");
  const int64_t B = qkv.dim(0), S = qkv.dim(1), D = qkv.dim(2) / slots;
  for (const Tensor* t : {&cos_q, &sin_q, &cos_k, &sin_k})
    ERNIE_CHECK(t->defined() && t->ndim() == 3 && (t->dim(0) == B || t->dim(0) == 1) && t->dim(1) == S &&
                    t->dim(2) == D,
                "qkv_rope: table ", t->defined() ? shape_str(t->shape()) : "undefined", " must be [", str(B),
                " or 1, ", str(S), ", ", str(D), "]");
  for (const Tensor* t : {&k_out, &v_out})
    ERNIE_CHECK(!t->defined() || (t->shape() == Shape{B, S, heads_kv, D} && t->dtype() == qkv.dtype()),
                "qkv_rope: output ", t->defined() ? shape_str(t->shape()) : "", " must be [", str(B), ", ", str(S),
                ", ", str(heads_kv), ", ", str(D), "] ", dtype_name(qkv.dtype()));
  return D;
}

int64_t linear_swiglu(const Tensor& x, const Tensor& gate_up) {
  ERNIE_CHECK(x.ndim() >= 1 && gate_up.ndim() == 2 && gate_up.dim(0) % 2 == 0 && gate_up.dim(1) == x.dim(-1),
              "linear_swiglu: weight ", shape_str(gate_up.shape()), " is not a stacked gate|up [2·I, in] for x ",
              shape_str(x.shape()));
  return gate_up.dim(0) / 2;
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  ERNIE_CHECK(q.ndim() == 4 && k.ndim() == 4 && k.shape() == v.shape(), "attention: q ", shape_str(q.shape()), ", k ",
              shape_str(k.shape()), ", v ", shape_str(v.shape()), " must be [B, S, heads, head_dim] with k = v");
  const int64_t B = q.dim(0), Hq = q.dim(2), D = q.dim(3), Sk = k.dim(1), Hkv = k.dim(2);
  ERNIE_CHECK(k.dim(0) == B && k.dim(3) == D && Hkv > 0 && Hq % Hkv == 0, "attention: q ", shape_str(q.shape()),
              " and k/v ", shape_str(k.shape()),
              " disagree on batch or head_dim, or q heads are not a multiple of kv heads");
  ERNIE_CHECK(mask.kv_len.empty() || int64_t(mask.kv_len.size()) == B, "attention: kv_len has ",
              std::to_string(mask.kv_len.size()), " entries for batch ", str(B));
  for (int64_t L : mask.kv_len)
    ERNIE_CHECK(L >= 0 && L <= Sk, "attention: kv_len ", str(L), " outside [0, ", str(Sk), "]");
  ERNIE_CHECK(mask.q_offset >= 0, "attention: negative q_offset ", str(mask.q_offset));
  if (mask.segments.empty()) return;
  ERNIE_CHECK(B == 1 && q.dim(1) == Sk && !mask.causal && mask.kv_len.empty() && mask.q_offset == 0,
              "attention: packed segments need one batch row, as many queries as keys, and no other mask (q ",
              shape_str(q.shape()), ", k ", shape_str(k.shape()), ")");
  int64_t total = 0;
  for (int64_t L : mask.segments) {
    ERNIE_CHECK(L > 0, "attention: a packed segment of length ", str(L));
    total += L;
  }
  ERNIE_CHECK(total == Sk, "attention: the packed segments cover ", str(total), " of ", str(Sk), " rows");
}

void attention_fp8(const Qkv8& x, const AttentionMask& mask) {
  ERNIE_CHECK(x.q.defined() && x.k.defined() && x.vt.defined() && x.v_scale.defined(),
              "attention_fp8: the fp8 inputs are incomplete (use qkv_norm_rope_fp8)");
  const Shape& s = x.q.shape();
  ERNIE_CHECK(x.q.ndim() == 4 && s[3] == 128 && x.k.shape() == s && x.q.dtype() == DType::F8_E4M3 &&
                  x.k.dtype() == DType::F8_E4M3,
              "attention_fp8: q ", shape_str(s), " and k ", shape_str(x.k.shape()),
              " must be F8_E4M3 [B, S, heads, 128]");
  const int64_t B = s[0], S = s[1], H = s[2];
  const Shape vt{B, H, 128, (S + 31) / 32 * 32}, vs{B, H, (S + kFp8AttentionTile - 1) / kFp8AttentionTile};
  ERNIE_CHECK(x.vt.shape() == vt && x.vt.dtype() == DType::F8_E4M3 && x.v_scale.shape() == vs &&
                  x.v_scale.dtype() == DType::F32,
              "attention_fp8: vt ", shape_str(x.vt.shape()), " / v_scale ", shape_str(x.v_scale.shape()),
              " should be F8_E4M3 ", shape_str(vt), " / F32 ", shape_str(vs));
  for (const Tensor* t : {&x.k, &x.vt, &x.v_scale})
    ERNIE_CHECK(t->device() == x.q.device(), "attention_fp8: inputs on different devices");
  ERNIE_CHECK(!mask.causal && mask.q_offset == 0 && mask.segments.empty(),
              "attention_fp8: causal masks and packed segments are not supported");
  ERNIE_CHECK(mask.kv_len.empty() || int64_t(mask.kv_len.size()) == B, "attention_fp8: kv_len has ",
              std::to_string(mask.kv_len.size()), " entries for batch ", str(B));
  for (int64_t L : mask.kv_len)
    ERNIE_CHECK(L >= 0 && L <= S, "attention_fp8: kv_len ", str(L), " outside [0, ", str(S), "]");
}

void quantized_weight(const Tensor& q, const Tensor& scale, const char* op) {
  ERNIE_CHECK(q.defined() && q.ndim() == 2 && (q.dtype() == DType::I8 || q.dtype() == DType::F8_E4M3), op,
              ": an 8-bit weight must be a 2-D I8 or F8_E4M3 tensor, got ", shape_str(q.shape()), " ",
              q.defined() ? dtype_name(q.dtype()) : "undefined");
  ERNIE_CHECK(scale.defined() && scale.dtype() == DType::F32 && scale.shape() == Shape{q.dim(0)} &&
                  scale.device() == q.device(),
              op, ": the scales of an 8-bit weight ", shape_str(q.shape()), " must be F32 [", str(q.dim(0)),
              "] on ", q.device().str(), ", got ", shape_str(scale.shape()), " ", dtype_name(scale.dtype()), " on ",
              scale.device().str());
}

int64_t row_vector_stride(const Tensor& x, const Tensor& v, const char* op, const char* what) {
  ERNIE_CHECK(x.ndim() >= 2, op, ": x ", shape_str(x.shape()), " must be [B, S, C]");
  const int64_t b = x.dim(0), c = x.dim(-1);
  const int64_t vb = v.ndim() >= 1 ? v.dim(0) : 0;
  ERNIE_CHECK(v.ndim() >= 2 && v.dim(-1) == c && (vb == b || vb == 1) && v.numel() == vb * c, op, ": ", what, " ",
              shape_str(v.shape()), " must be [", std::to_string(b), " or 1, ", std::to_string(c), "] for x ",
              shape_str(x.shape()));
  return vb == 1 ? 0 : c;
}

void fp8_linear_operands(const Tensor& x, const Tensor& sx, const Tensor& q, const Tensor& scale) {
  quantized_weight(x, sx, "linear (quantized x)");
  quantized_weight(q, scale, "linear");
  ERNIE_CHECK(x.dtype() == DType::F8_E4M3 && q.dtype() == DType::F8_E4M3, "linear: a pre-quantized x needs F8_E4M3 ",
              "x and weight, got ", dtype_name(x.dtype()), " and ", dtype_name(q.dtype()));
}

float quantize(const Tensor& x, DType q) {
  ERNIE_CHECK(q == DType::I8 || q == DType::F8_E4M3, "quantize: target dtype must be I8 or F8_E4M3, not ",
              dtype_name(q));
  ERNIE_CHECK(x.defined() && x.ndim() == 2 && dtype_is_float(x.dtype()), "quantize: input must be a 2-D float "
              "tensor, got ", shape_str(x.shape()), " ", x.defined() ? dtype_name(x.dtype()) : "undefined");
  return q == DType::I8 ? 127.f : kFp8E4m3Max;
}

void static_scale(const Tensor& scale) {
  ERNIE_CHECK(scale.defined() && scale.numel() == 1 && scale.dtype() == DType::F32,
              "quantize: a static scale must be one F32 value, got ",
              scale.defined() ? shape_str(scale.shape()) + " " + dtype_name(scale.dtype()) : std::string("undefined"));
}

}  // namespace ernie::ops::rules
