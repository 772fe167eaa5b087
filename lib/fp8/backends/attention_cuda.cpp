// cuDNN's fused FP8 attention through cudnn-frontend's graph API (attention.h): one forward and
// one backward graph per shape, built on first use and cached (refusals too, so a shape cuDNN
// refuses is asked once). The only file that includes cudnn_frontend.h; compiled only where CMake
// found its headers (FP8T_CUDNN_FRONTEND_INCLUDE), attention_absent.cpp otherwise.
#include "lib/fp8/backends/attention.h"

#include <ATen/cuda/CUDAContext.h>  // at::cuda::getCurrentCUDAStream, getCurrentDeviceProperties
#include <ATen/cudnn/Handle.h>      // at::native::getCudnnHandle
#include <cudnn_frontend.h>         // cudnn_frontend::graph::Graph

#include <functional>     // std::function
#include <map>            // std::map
#include <memory>         // std::shared_ptr
#include <mutex>          // std::mutex
#include <sstream>        // std::ostringstream
#include <unordered_map>  // std::unordered_map

#include "lib/util/error.h"  // FP8T_CHECK

namespace fp8t {
namespace fp8 {
namespace {

namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;
using VariantPack = std::unordered_map<TensorAttr, void*>;

fe::DataType_t fe_type(Format f) { return f == Format::kE4M3 ? fe::DataType_t::FP8_E4M3 : fe::DataType_t::FP8_E5M2; }

std::optional<fe::DataType_t> fe_type(at::ScalarType t) {
  if (t == at::kBFloat16) return fe::DataType_t::BFLOAT16;
  if (t == at::kHalf) return fe::DataType_t::HALF;
  return std::nullopt;  // cuDNN's FP8 attention writes 16-bit or FP8 outputs only
}

std::vector<int64_t> bhsd_strides(const std::vector<int64_t>& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// A [B, heads, T, D] tensor of the graph, contiguous.
TensorAttr bhsd(fe::graph::Graph& g, const char* name, std::vector<int64_t> dims, fe::DataType_t type) {
  const std::vector<int64_t> strides = bhsd_strides(dims);
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_dim(std::move(dims)).set_stride(strides).set_data_type(type));
}

TensorAttr scalar(fe::graph::Graph& g, const char* name) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::FLOAT));
}

void mark_scalar_output(const TensorAttr& t) {
  t->set_output(true).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
}

// The handle of the current device, on the current stream.
cudnnHandle_t current_handle() {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  FP8T_CHECK(cudnnSetStream(handle, at::cuda::getCurrentCUDAStream()) == CUDNN_STATUS_SUCCESS,
             "fp8 attention: cudnnSetStream failed");
  return handle;
}

// validate, build, plan, in turn: the first refusal's message, or "" when the graph is ready.
std::string build(fe::graph::Graph& g, cudnnHandle_t handle) {
  const std::function<fe::error_t()> steps[] = {
      [&] { return g.validate(); }, [&] { return g.build_operation_graph(handle); },
      [&] { return g.create_execution_plans({fe::HeurMode_t::A}); }, [&] { return g.check_support(handle); },
      [&] { return g.build_plans(handle); }};
  for (const auto& step : steps) {
    fe::error_t e = step();
    if (!e.is_good()) return e.get_message().empty() ? std::string("cuDNN refused the graph") : e.get_message();
  }
  return "";
}

struct ForwardGraph {
  fe::graph::Graph graph;
  TensorAttr q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, o, stats, amax_s, amax_o;
  std::string refused;
};

struct BackwardGraph {
  fe::graph::Graph graph;
  TensorAttr q, k, v, o, dout, stats;
  TensorAttr descale_q, descale_k, descale_v, descale_o, descale_do, descale_s, descale_dp;
  TensorAttr scale_s, scale_dq, scale_dk, scale_dv, scale_dp;
  TensorAttr dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp;
  std::string refused;
};

// The graphs' names for the dims: B, H (query heads), KV, T, D.
struct Shape {
  int64_t B, H, KV, T, D;
};

Shape shape_of(const AttentionOperand& q, const AttentionOperand& k) {
  return Shape{q.codes.size(0), q.codes.size(1), k.codes.size(1), q.codes.size(2), q.codes.size(3)};
}

std::shared_ptr<ForwardGraph> make_forward(const Shape& s, double attn_scale, fe::DataType_t out) {
  auto fg = std::make_shared<ForwardGraph>();
  fe::graph::Graph& g = fg->graph;
  g.set_io_data_type(fe::DataType_t::FP8_E4M3)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  fg->q = bhsd(g, "Q", {s.B, s.H, s.T, s.D}, fe::DataType_t::FP8_E4M3);
  fg->k = bhsd(g, "K", {s.B, s.KV, s.T, s.D}, fe::DataType_t::FP8_E4M3);
  fg->v = bhsd(g, "V", {s.B, s.KV, s.T, s.D}, fe::DataType_t::FP8_E4M3);
  fg->descale_q = scalar(g, "Descale_Q");
  fg->descale_k = scalar(g, "Descale_K");
  fg->descale_v = scalar(g, "Descale_V");
  fg->descale_s = scalar(g, "Descale_S");
  fg->scale_s = scalar(g, "Scale_S");
  fg->scale_o = scalar(g, "Scale_O");
  auto options = fe::graph::SDPA_fp8_attributes()
                     .set_name("fp8t_attention")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(static_cast<float>(attn_scale));
  auto [o, stats, amax_s, amax_o] = g.sdpa_fp8(fg->q, fg->k, fg->v, fg->descale_q, fg->descale_k, fg->descale_v,
                                               fg->descale_s, fg->scale_s, fg->scale_o, options);
  o->set_output(true).set_dim({s.B, s.H, s.T, s.D}).set_stride(bhsd_strides({s.B, s.H, s.T, s.D})).set_data_type(out);
  stats->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  mark_scalar_output(amax_s);
  mark_scalar_output(amax_o);
  fg->o = o;
  fg->stats = stats;
  fg->amax_s = amax_s;
  fg->amax_o = amax_o;
  fg->refused = build(g, current_handle());
  return fg;
}

std::shared_ptr<BackwardGraph> make_backward(const Shape& s, double attn_scale, Format grad_format,
                                             fe::DataType_t out) {
  auto bg = std::make_shared<BackwardGraph>();
  fe::graph::Graph& g = bg->graph;
  // The io type is the gradients' (dO, dS); the forward's tensors say E4M3 themselves.
  g.set_io_data_type(fe_type(grad_format))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> qo = {s.B, s.H, s.T, s.D}, kv = {s.B, s.KV, s.T, s.D};
  bg->q = bhsd(g, "Q", qo, fe::DataType_t::FP8_E4M3);
  bg->k = bhsd(g, "K", kv, fe::DataType_t::FP8_E4M3);
  bg->v = bhsd(g, "V", kv, fe::DataType_t::FP8_E4M3);
  bg->o = bhsd(g, "O", qo, fe::DataType_t::FP8_E4M3);
  bg->dout = bhsd(g, "dO", qo, fe_type(grad_format));
  bg->stats = g.tensor(fe::graph::Tensor_attributes().set_name("Stats").set_dim({s.B, s.H, s.T, 1})
                           .set_stride({s.H * s.T, s.T, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
  for (auto [t, name] : {std::pair{&bg->descale_q, "Descale_Q"}, {&bg->descale_k, "Descale_K"},
                         {&bg->descale_v, "Descale_V"}, {&bg->descale_o, "Descale_O"}, {&bg->descale_do, "Descale_dO"},
                         {&bg->descale_s, "Descale_S"}, {&bg->descale_dp, "Descale_dP"}, {&bg->scale_s, "Scale_S"},
                         {&bg->scale_dq, "Scale_dQ"}, {&bg->scale_dk, "Scale_dK"}, {&bg->scale_dv, "Scale_dV"},
                         {&bg->scale_dp, "Scale_dP"}}) {
    *t = scalar(g, name);
  }
  auto options = fe::graph::SDPA_fp8_backward_attributes()
                     .set_name("fp8t_attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(static_cast<float>(attn_scale));
  auto [dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp] = g.sdpa_fp8_backward(
      bg->q, bg->k, bg->v, bg->o, bg->dout, bg->stats, bg->descale_q, bg->descale_k, bg->descale_v, bg->descale_o,
      bg->descale_do, bg->descale_s, bg->descale_dp, bg->scale_s, bg->scale_dq, bg->scale_dk, bg->scale_dv,
      bg->scale_dp, options);
  dq->set_output(true).set_dim(qo).set_stride(bhsd_strides(qo)).set_data_type(out);
  dk->set_output(true).set_dim(kv).set_stride(bhsd_strides(kv)).set_data_type(out);
  dv->set_output(true).set_dim(kv).set_stride(bhsd_strides(kv)).set_data_type(out);
  for (const TensorAttr& a : {amax_dq, amax_dk, amax_dv, amax_dp}) mark_scalar_output(a);
  bg->dq = dq, bg->dk = dk, bg->dv = dv;
  bg->amax_dq = amax_dq, bg->amax_dk = amax_dk, bg->amax_dv = amax_dv, bg->amax_dp = amax_dp;
  bg->refused = build(g, current_handle());
  return bg;
}

// The graphs by shape, dtype and device; built under the lock (a first step builds each once).
std::mutex cache_mutex;
std::map<std::string, std::shared_ptr<ForwardGraph>> forward_cache;
std::map<std::string, std::shared_ptr<BackwardGraph>> backward_cache;

std::string cache_key(const Shape& s, double attn_scale, int out, int format, bool fp8_outputs) {
  std::ostringstream k;
  k << at::cuda::current_device() << ':' << s.B << 'x' << s.H << 'x' << s.KV << 'x' << s.T << 'x' << s.D << ':'
    << attn_scale << ':' << out << ':' << format << ':' << fp8_outputs;
  return k.str();
}

std::shared_ptr<ForwardGraph> forward_graph(const Shape& s, double attn_scale, at::ScalarType out_dtype,
                                            fe::DataType_t out) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto& slot = forward_cache[cache_key(s, attn_scale, static_cast<int>(out_dtype), 0, out == fe::DataType_t::FP8_E4M3)];
  if (!slot) slot = make_forward(s, attn_scale, out);
  return slot;
}

std::shared_ptr<BackwardGraph> backward_graph(const Shape& s, double attn_scale, at::ScalarType out_dtype,
                                              Format grad_format, bool fp8_outputs, fe::DataType_t out) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto& slot = backward_cache[cache_key(s, attn_scale, static_cast<int>(out_dtype), static_cast<int>(grad_format),
                                        fp8_outputs)];
  if (!slot) slot = make_backward(s, attn_scale, grad_format, out);
  return slot;
}

void* ptr(const at::Tensor& t) { return t.data_ptr(); }
at::Tensor f32(float v, const at::Device& d) {
  return at::full({}, v, at::TensorOptions().dtype(at::kFloat).device(d));
}
at::Tensor workspace(fe::graph::Graph& g, const at::Device& d) {
  int64_t bytes = 0;
  FP8T_CHECK(g.get_workspace_size(bytes).is_good(), "fp8 attention: cuDNN gave no workspace size");
  return at::empty({std::max<int64_t>(bytes, 1)}, at::TensorOptions().dtype(at::kByte).device(d));
}

void execute(fe::graph::Graph& g, const VariantPack& pack, const at::Tensor& ws) {
  fe::error_t e = g.execute(current_handle(), const_cast<VariantPack&>(pack), ws.data_ptr());
  FP8T_CHECK(e.is_good(), "fp8 attention: cuDNN's FP8 attention failed to run: ", e.get_message());
}

// slot.amax = max(slot.amax, amax): a kernel's amax output into a scale's amax sink.
void record_amax(const SlotRef& slot, const at::Tensor& amax) {
  if (slot.amax.defined()) slot.amax.copy_(at::maximum(slot.amax, amax.reshape({})));
}

// An FP8 output of the kernel as values in `dtype`.
at::Tensor decode_output(const at::Tensor& codes, const SlotRef& slot, at::ScalarType dtype) {
  const at::ScalarType fp8 = slot.format == Format::kE4M3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
  return (codes.view(fp8).to(at::kFloat) * at::reciprocal(slot.scale)).to(dtype);
}

}  // namespace

std::string cudnn_attention_unavailable() { return ""; }

std::string cudnn_attention_refusal(const AttentionShape& shape, double attn_scale, at::ScalarType out_dtype,
                                    Format grad_format, bool fp8_outputs) {
  const std::optional<fe::DataType_t> out = fe_type(out_dtype);
  if (!out) return std::string("output dtype ") + c10::toString(out_dtype) + " (cuDNN writes bf16 or fp16)";
  const Shape s{shape.batch, shape.heads, shape.kv_heads, shape.seq, shape.head_dim};
  const fe::DataType_t o_type = fp8_outputs ? fe::DataType_t::FP8_E4M3 : *out;
  const std::string fwd = forward_graph(s, attn_scale, out_dtype, o_type)->refused;
  if (!fwd.empty()) return "forward: " + fwd;
  const fe::DataType_t grads = fp8_outputs ? fe_type(grad_format) : *out;
  const std::string bwd = backward_graph(s, attn_scale, out_dtype, grad_format, fp8_outputs, grads)->refused;
  return bwd.empty() ? "" : "backward: " + bwd;
}

bool cudnn_attention_needs_fp8_outputs(const at::Device& device) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index());
  // Before Blackwell, or before cuDNN 9.13, dQ, dK and dV leave the FP8 backward in FP8 only.
  return prop->major < 10 || cudnnGetVersion() < 91300;
}

std::optional<AttentionForward> cudnn_attention_forward(const AttentionOperand& q, const AttentionOperand& k,
                                                        const AttentionOperand& v, double attn_scale,
                                                        at::ScalarType out_dtype, const SlotRef* o_slot,
                                                        std::string* refused) {
  const std::optional<fe::DataType_t> out16 = fe_type(out_dtype);
  if (!out16) {
    *refused = std::string("output dtype ") + c10::toString(out_dtype) + " (cuDNN writes bf16 or fp16)";
    return std::nullopt;
  }
  const Shape s = shape_of(q, k);
  const std::shared_ptr<ForwardGraph> fg =
      forward_graph(s, attn_scale, out_dtype, o_slot != nullptr ? fe::DataType_t::FP8_E4M3 : *out16);
  if (!fg->refused.empty()) {
    *refused = fg->refused;
    return std::nullopt;
  }
  const at::Device dev = q.codes.device();
  const auto fopt = at::TensorOptions().dtype(at::kFloat).device(dev);
  const auto o_opt = o_slot != nullptr ? fopt.dtype(at::kByte) : fopt.dtype(out_dtype);
  const at::Tensor o = at::empty({s.B, s.H, s.T, s.D}, o_opt);
  AttentionForward r{o, at::empty({s.B, s.H, s.T, 1}, fopt), {}};
  const at::Tensor p_scale = f32(attention_p_scale(), dev), p_descale = f32(1.0f / attention_p_scale(), dev);
  const at::Tensor scale_o = o_slot != nullptr ? o_slot->scale.contiguous() : f32(1.0f, dev);
  const at::Tensor amax_s = at::zeros({}, fopt), amax_o = at::zeros({}, fopt);
  const VariantPack pack = {{fg->q, ptr(q.codes)}, {fg->k, ptr(k.codes)}, {fg->v, ptr(v.codes)},
                            {fg->descale_q, ptr(q.scale_inv)}, {fg->descale_k, ptr(k.scale_inv)},
                            {fg->descale_v, ptr(v.scale_inv)}, {fg->descale_s, ptr(p_descale)},
                            {fg->scale_s, ptr(p_scale)}, {fg->scale_o, ptr(scale_o)}, {fg->o, ptr(o)},
                            {fg->stats, ptr(r.stats)}, {fg->amax_s, ptr(amax_s)}, {fg->amax_o, ptr(amax_o)}};
  execute(fg->graph, pack, workspace(fg->graph, dev));
  if (o_slot == nullptr) return r;
  record_amax(*o_slot, amax_o);
  r.o8 = AttentionOperand{o, at::reciprocal(o_slot->scale), Format::kE4M3};
  r.out = decode_output(o, *o_slot, out_dtype);
  return r;
}

std::optional<AttentionGrads> cudnn_attention_backward(const AttentionBackwardInputs& in,
                                                       const AttentionGradScales& scales, double attn_scale,
                                                       at::ScalarType out_dtype, std::string* refused) {
  const std::optional<fe::DataType_t> out16 = fe_type(out_dtype);
  if (!out16) {
    *refused = std::string("output dtype ") + c10::toString(out_dtype) + " (cuDNN writes bf16 or fp16)";
    return std::nullopt;
  }
  const fe::DataType_t out = scales.fp8_outputs ? fe_type(scales.dq.format) : *out16;
  const Shape s = shape_of(in.q, in.k);
  const Format grad_format = in.dout.format;
  const std::shared_ptr<BackwardGraph> bg =
      backward_graph(s, attn_scale, out_dtype, grad_format, scales.fp8_outputs, out);
  if (!bg->refused.empty()) {
    *refused = bg->refused;
    return std::nullopt;
  }
  const at::Device dev = in.q.codes.device();
  const auto fopt = at::TensorOptions().dtype(at::kFloat).device(dev);
  const auto out_opt = scales.fp8_outputs ? fopt.dtype(at::kByte) : fopt.dtype(out_dtype);
  at::Tensor dq = at::empty({s.B, s.H, s.T, s.D}, out_opt), dk = at::empty({s.B, s.KV, s.T, s.D}, out_opt),
             dv = at::empty({s.B, s.KV, s.T, s.D}, out_opt);
  const at::Tensor p_scale = f32(attention_p_scale(), dev), p_descale = f32(1.0f / attention_p_scale(), dev);
  const at::Tensor one = f32(1.0f, dev), ds_descale = at::reciprocal(scales.ds.scale).contiguous();
  const at::Tensor scale_dq = scales.fp8_outputs ? scales.dq.scale.contiguous() : one;
  const at::Tensor scale_dk = scales.fp8_outputs ? scales.dk.scale.contiguous() : one;
  const at::Tensor scale_dv = scales.fp8_outputs ? scales.dv.scale.contiguous() : one;
  const at::Tensor scale_ds = scales.ds.scale.contiguous();
  at::Tensor amax = at::zeros({4}, fopt);
  const VariantPack pack = {
      {bg->q, ptr(in.q.codes)}, {bg->k, ptr(in.k.codes)}, {bg->v, ptr(in.v.codes)}, {bg->o, ptr(in.o.codes)},
      {bg->dout, ptr(in.dout.codes)}, {bg->stats, ptr(in.stats)}, {bg->descale_q, ptr(in.q.scale_inv)},
      {bg->descale_k, ptr(in.k.scale_inv)}, {bg->descale_v, ptr(in.v.scale_inv)},
      {bg->descale_o, ptr(in.o.scale_inv)}, {bg->descale_do, ptr(in.dout.scale_inv)},
      {bg->descale_s, ptr(p_descale)}, {bg->descale_dp, ptr(ds_descale)}, {bg->scale_s, ptr(p_scale)},
      {bg->scale_dq, ptr(scale_dq)}, {bg->scale_dk, ptr(scale_dk)}, {bg->scale_dv, ptr(scale_dv)},
      {bg->scale_dp, ptr(scale_ds)}, {bg->dq, ptr(dq)}, {bg->dk, ptr(dk)}, {bg->dv, ptr(dv)},
      {bg->amax_dq, ptr(amax[0])}, {bg->amax_dk, ptr(amax[1])}, {bg->amax_dv, ptr(amax[2])},
      {bg->amax_dp, ptr(amax[3])}};
  execute(bg->graph, pack, workspace(bg->graph, dev));
  record_amax(scales.ds, amax[3]);
  if (!scales.fp8_outputs) return AttentionGrads{dq, dk, dv};
  record_amax(scales.dq, amax[0]);
  record_amax(scales.dk, amax[1]);
  record_amax(scales.dv, amax[2]);
  return AttentionGrads{decode_output(dq, scales.dq, out_dtype), decode_output(dk, scales.dk, out_dtype),
                        decode_output(dv, scales.dv, out_dtype)};
}

}  // namespace fp8
}  // namespace fp8t
