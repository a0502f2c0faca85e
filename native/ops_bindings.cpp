// Test bindings of the op layer: kokoro_gpu._native.ops, one function per op
// of native/include/kokoro/ops.h, taking and returning NumPy float32 / int32
// arrays. Each call uploads its inputs, fills every output buffer with NaN
// bytes (0xFF; -1 for int32) so an unwritten element shows, runs the op on a
// private stream, synchronises and downloads. For the unit tests against the
// NumPy reference ops; the engine itself never goes through here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kokoro/bindings.h"
#include "kokoro/check.h"
#include "kokoro/ops.h"
#include "kokoro/shared_gpu.h"

namespace py = pybind11;

namespace kokoro {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using OptionalFloat = std::optional<FloatArray>;
using DoubleArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

// One stream and one cuBLAS handle for every test call, created on first use
// and deliberately never destroyed (the CUDA context may already be gone at
// interpreter exit).
struct TestContext {
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
};

TestContext& context() {
    static TestContext* ctx = [] {
        auto* c = new TestContext;
        KOKORO_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
        KOKORO_CUBLAS_CHECK(cublasCreate(&c->blas));
        KOKORO_CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
        return c;
    }();
    return *ctx;
}

cudaStream_t stream() { return context().stream; }

// A device array of T, freed on scope exit.
template <typename T>
class DeviceArray {
public:
    explicit DeviceArray(int64_t n) : n_(n) {
        if (n_ > 0) ptr_ = static_cast<T*>(device_alloc(size_t(n_) * sizeof(T), "op test buffer"));
    }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    ~DeviceArray() { (void)cudaFree(ptr_); }  // destructors cannot throw

    // Uploaded copy of a host array.
    static DeviceArray from(const py::array_t<T, py::array::c_style | py::array::forcecast>& a) {
        DeviceArray d(int64_t(a.size()));
        if (d.n_ > 0) {
            KOKORO_CUDA_CHECK(cudaMemcpyAsync(d.ptr_, a.data(), size_t(d.n_) * sizeof(T),
                                              cudaMemcpyHostToDevice, stream()));
        }
        return d;
    }
    // Output buffer, poisoned.
    static DeviceArray poisoned(int64_t n) {
        DeviceArray d(n);
        if (n > 0) KOKORO_CUDA_CHECK(cudaMemsetAsync(d.ptr_, 0xFF, size_t(n) * sizeof(T), stream()));
        return d;
    }
    DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; o.n_ = 0; }

    T* get() const { return ptr_; }
    // Synchronises the test stream, then copies back with the given shape.
    py::array_t<T> download(std::vector<py::ssize_t> shape) const {
        KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream()));
        py::array_t<T> out(shape);
        if (n_ > 0) {
            KOKORO_CUDA_CHECK(cudaMemcpy(out.mutable_data(), ptr_, size_t(n_) * sizeof(T),
                                         cudaMemcpyDeviceToHost));
        }
        return out;
    }

private:
    T* ptr_ = nullptr;
    int64_t n_ = 0;
};

using DFloat = DeviceArray<float>;
using DInt = DeviceArray<int32_t>;

// Uploads an optional array; the pointer stays null when absent.
struct OptionalDevice {
    std::optional<DFloat> buffer;
    explicit OptionalDevice(const OptionalFloat& a) {
        if (a) buffer.emplace(DFloat::from(*a));
    }
    const float* get() const { return buffer ? buffer->get() : nullptr; }
};

void require(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
}

int dim(const py::array& a, int axis) { return int(a.shape(axis)); }

void require_ndim(const py::array& a, int ndim, const char* name) {
    require(a.ndim() == ndim, std::string(name) + " must have " + std::to_string(ndim) + " dims");
}

// A conv weight [A, B, K] in PyTorch's layout, relaid as the ops' [A, K, B].
FloatArray relaid_conv_weight(const FloatArray& w) {
    FloatArray relaid({w.shape(0), w.shape(2), w.shape(1)});
    ops::conv_weight_to_device_layout(w.data(), relaid.mutable_data(), dim(w, 0), dim(w, 1),
                                      dim(w, 2));
    return relaid;
}

DFloat conv_weight(const FloatArray& w) { return DFloat::from(relaid_conv_weight(w)); }

// FP16 weights laid out on the host, on the device.
DeviceArray<__half> upload_halves(const std::vector<__half>& host) {
    DeviceArray<__half> d(int64_t(host.size()));
    KOKORO_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(__half),
                                 cudaMemcpyHostToDevice));
    return d;
}

// The same weight as the tensor-core conv's FP16 [A, K, half_rows_pitch(B)]
// (per part of `form`), with its w_scale.
struct HalfWeight {
    DeviceArray<__half> w;
    float scale;
};
HalfWeight conv_weight_half(const FloatArray& w, ops::HalfOperands form) {
    const int A = dim(w, 0), B = dim(w, 1), K = dim(w, 2);
    std::vector<__half> host(size_t(ops::half_parts(form)) * A * K * ops::half_rows_pitch(B));
    const float scale =
        ops::conv_weight_to_half_rows(relaid_conv_weight(w).data(), host.data(), A, K, B, form);
    return {upload_halves(host), scale};
}

// A linear weight [out, in] as the split linear's FP16 [2, out, split_pitch(in)],
// with its w_scale.
HalfWeight linear_weight_split(const FloatArray& w) {
    const int out = dim(w, 0), in = dim(w, 1);
    std::vector<__half> host(size_t(2) * out * ops::split_pitch(in));
    const float scale = ops::linear_weight_to_split_half(w.data(), host.data(), out, in);
    return {upload_halves(host), scale};
}

// FP16 device values downloaded as float32 (every FP16 value is exact in
// it), shaped `shape`.
py::array_t<float> download_halves(const DeviceArray<__half>& d, std::vector<py::ssize_t> shape) {
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream()));
    py::array_t<float> out(shape);
    std::vector<__half> host(size_t(out.size()));
    KOKORO_CUDA_CHECK(cudaMemcpy(host.data(), d.get(), host.size() * sizeof(__half),
                                 cudaMemcpyDeviceToHost));
    float* o = out.mutable_data();
    for (size_t i = 0; i < host.size(); ++i) o[i] = __half2float(host[i]);
    return out;
}

// x [C, T] rounded to FP16 on the device as the engine's FP16 channels-first
// tensors are stored (rows at ops::half_channels_pitch(T), the padding NaN:
// never read as values).
DeviceArray<__half> upload_half_channels(const FloatArray& x) {
    const int C = dim(x, 0), T = dim(x, 1), pitch = ops::half_channels_pitch(T);
    std::vector<__half> host(size_t(C) * pitch, __float2half_rn(NAN));
    for (int c = 0; c < C; ++c) {
        for (int t = 0; t < T; ++t) {
            host[size_t(c) * pitch + t] = __float2half_rn(x.data()[int64_t(c) * T + t]);
        }
    }
    return upload_halves(host);
}

// Such a tensor downloaded as float32 [C, T].
py::array_t<float> download_half_channels(const DeviceArray<__half>& d, int C, int T) {
    const int pitch = ops::half_channels_pitch(T);
    const py::array_t<float> padded = download_halves(d, {C, pitch});
    py::array_t<float> out({C, T});
    for (int c = 0; c < C; ++c) {
        std::copy_n(padded.data() + int64_t(c) * pitch, T, out.mutable_data() + int64_t(c) * T);
    }
    return out;
}

// Half rows [T, ld] ([2, T, ld]: hi, lo when split) downloaded as float32.
py::array_t<float> download_half_rows(const DeviceArray<__half>& rows, int T, int ld,
                                      ops::HalfOperands form) {
    const int parts = ops::half_parts(form);
    if (parts == 1) return download_halves(rows, {T, ld});
    return download_halves(rows, {parts, T, ld});
}

ops::HalfOperands half_form(bool split) {
    return split ? ops::HalfOperands::kSplit : ops::HalfOperands::kRounded;
}

// The tests' choice of tensor-core kernel: the best for the GPU, or mma.sync.
ops::HalfKernel half_kernel(bool mma_sync) {
    return mma_sync ? ops::HalfKernel::kMmaSync : ops::HalfKernel::kBest;
}

// ---------------------------------------------------------------- linear
py::array_t<float> matmul(const FloatArray& a, const FloatArray& b, bool trans_a, bool trans_b) {
    require_ndim(a, 2, "a");
    require_ndim(b, 2, "b");
    const int M = trans_a ? dim(a, 1) : dim(a, 0), K = trans_a ? dim(a, 0) : dim(a, 1);
    const int N = trans_b ? dim(b, 0) : dim(b, 1);
    require((trans_b ? dim(b, 1) : dim(b, 0)) == K, "matmul: inner dims differ");
    DFloat da = DFloat::from(a), db = DFloat::from(b), c = DFloat::poisoned(int64_t(M) * N);
    ops::matmul(context().blas, trans_a, trans_b, M, N, K, da.get(), dim(a, 1), db.get(), dim(b, 1),
                0.f, c.get(), N, stream());
    return c.download({M, N});
}

// split: ops::linear_split_half on w split at the host, as the engine's
// fast precision uploads it (mma_sync: on that kernel, not the best); with
// stacked (lengths of x's row blocks, adding up to its rows), each block's
// rows on the split plan of a call on that block alone (row_chunks, as a
// batch's token groups run); else ops::linear (plain fp32).
py::array_t<float> linear(const FloatArray& x, const FloatArray& w, const OptionalFloat& b,
                          const OptionalFloat& y0, float beta, bool split, bool mma_sync,
                          const std::optional<std::vector<int>>& stacked) {
    require_ndim(x, 2, "x");
    require_ndim(w, 2, "w");
    const int rows = dim(x, 0), in = dim(x, 1), out = dim(w, 0);
    require(dim(w, 1) == in, "linear: w does not match x");
    require(!stacked || split, "linear: stacked rows need split=True");
    DFloat dx = DFloat::from(x);
    OptionalDevice db(b);
    DFloat y = y0 ? DFloat::from(*y0) : DFloat::poisoned(int64_t(rows) * out);
    if (split) {
        const HalfWeight dw = linear_weight_split(w);
        DeviceArray<__half> x_split(2 * int64_t(rows) * ops::split_pitch(in));
        const ops::HalfKernel kernel = half_kernel(mma_sync);
        std::optional<DInt> row_chunks;
        if (stacked) {
            int64_t total = 0;
            for (const int n : *stacked) {
                require(n > 0, "linear: stacked lengths must add up to rows");
                total += n;
            }
            require(total == rows, "linear: stacked lengths must add up to rows");
            const std::vector<int32_t> chunks =
                ops::linear_split_half_row_chunks(*stacked, in, out, kernel);
            row_chunks.emplace(DInt::from(IntArray(rows, chunks.data())));
        }
        const int32_t* plans = row_chunks ? row_chunks->get() : nullptr;
        DFloat scratch(
            ops::linear_split_half_scratch_floats(rows, in, out, kernel, plans != nullptr));
        ops::linear_split_half(dx.get(), x_split.get(), dw.w.get(), dw.scale, db.get(), y.get(),
                               rows, in, out, scratch.get(), stream(), beta, kernel, plans);
    } else {
        DFloat dw = DFloat::from(w);
        ops::linear(context().blas, dx.get(), dw.get(), db.get(), y.get(), rows, in, out, stream(),
                    beta);
    }
    return y.download({rows, out});
}

// ALBERT's ffn as the fast engine runs it: the split linear (w1, b1) whose
// split sums the GELU adds, the GELU writing the split operand of the
// second split linear (w2, no bias) itself.
py::array_t<float> albert_ffn(const FloatArray& x, const FloatArray& w1, const FloatArray& b1,
                              const FloatArray& w2) {
    require_ndim(x, 2, "x");
    require_ndim(w1, 2, "w1");
    require_ndim(w2, 2, "w2");
    const int rows = dim(x, 0), in = dim(x, 1), inter = dim(w1, 0), out = dim(w2, 0);
    require(dim(w1, 1) == in && dim(b1, 0) == inter && dim(w2, 1) == inter,
            "albert_ffn: w1, b1, w2 do not match x");
    const HalfWeight dw1 = linear_weight_split(w1), dw2 = linear_weight_split(w2);
    DFloat dx = DFloat::from(x), db1 = DFloat::from(b1);
    DFloat hidden = DFloat::poisoned(int64_t(rows) * inter);
    DFloat y = DFloat::poisoned(int64_t(rows) * out);
    DeviceArray<__half> x_split(2 * int64_t(rows) * ops::split_pitch(std::max(in, inter)));
    DFloat scratch(std::max(ops::linear_split_half_scratch_floats(rows, in, inter),
                            ops::linear_split_half_scratch_floats(rows, inter, out)));
    const ops::SplitSums sums =
        ops::linear_split_half_sums(dx.get(), x_split.get(), dw1.w.get(), dw1.scale,
                                    hidden.get(), rows, in, inter, scratch.get(), stream());
    ops::gelu_new_split(sums, x_split.get(), rows, inter, db1.get(), stream());
    ops::linear_split_half(nullptr, x_split.get(), dw2.w.get(), dw2.scale, nullptr, y.get(), rows,
                           inter, out, scratch.get(), stream());
    return y.download({rows, out});
}

// ----------------------------------------------------------- elementwise
// positions (may be None): each token's position row, as stacked utterances give it.
py::array_t<float> albert_embeddings(const IntArray& ids, const FloatArray& word,
                                     const OptionalFloat& pos, const OptionalFloat& type0,
                                     const std::optional<IntArray>& positions) {
    const int T = int(ids.size()), d = dim(word, 1);
    require(!positions || int(positions->size()) == T, "albert_embeddings: one position per id");
    DInt di = DInt::from(ids);
    DFloat dw = DFloat::from(word), out = DFloat::poisoned(int64_t(T) * d);
    OptionalDevice dp(pos), dt(type0);
    std::optional<DInt> dpos;
    if (positions) dpos.emplace(DInt::from(*positions));
    if (!pos && !type0) {
        ops::embedding(di.get(), dw.get(), out.get(), T, d, stream());
    } else {
        ops::albert_embeddings(di.get(), dw.get(), dp.get(), dt.get(), out.get(), T, d, stream(),
                               dpos ? dpos->get() : nullptr);
    }
    return out.download({T, d});
}

// gelu_new(x + bias) on the rows of x (bias over its last axis), or of x alone.
py::array_t<float> gelu_new(const FloatArray& x, const OptionalFloat& bias) {
    const int cols = x.ndim() > 0 ? dim(x, x.ndim() - 1) : 1;
    require(!bias || (bias->ndim() == 1 && dim(*bias, 0) == cols),
            "gelu_new: bias must match the last axis of x");
    DFloat y = DFloat::from(x);
    OptionalDevice db(bias);
    ops::gelu_new(y.get(), y.get(), cols > 0 ? int64_t(x.size()) / cols : 0, cols, db.get(),
                  stream());
    return y.download(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
}

py::array_t<float> leaky_relu(const FloatArray& x, float slope, bool in_place) {
    DFloat dx = DFloat::from(x);
    DFloat y = DFloat::poisoned(in_place ? 0 : int64_t(x.size()));
    float* out = in_place ? dx.get() : y.get();
    ops::leaky_relu(dx.get(), out, int64_t(x.size()), slope, stream());
    return (in_place ? dx : y).download(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
}

py::array_t<float> add_scaled(const FloatArray& a, const FloatArray& b, float scale) {
    require(a.size() == b.size(), "add_scaled: sizes differ");
    DFloat da = DFloat::from(a), db = DFloat::from(b), out = DFloat::poisoned(int64_t(a.size()));
    ops::add_scaled(da.get(), db.get(), out.get(), int64_t(a.size()), scale, stream());
    return out.download(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
}

py::array_t<float> copy_rows(const FloatArray& src, int src_col, const FloatArray& dst, int dst_col,
                             int cols) {
    require_ndim(src, 2, "src");
    require_ndim(dst, 2, "dst");
    const int rows = dim(src, 0);
    require(dim(dst, 0) == rows && src_col + cols <= dim(src, 1) && dst_col + cols <= dim(dst, 1),
            "copy_rows: block out of range");
    DFloat ds = DFloat::from(src), dd = DFloat::from(dst);
    ops::copy_rows(ds.get() + src_col, dim(src, 1), dd.get() + dst_col, dim(dst, 1), rows, cols,
                   stream());
    return dd.download({rows, dim(dst, 1)});
}

py::array_t<float> transpose(const FloatArray& x) {
    require_ndim(x, 2, "x");
    const int rows = dim(x, 0), cols = dim(x, 1);
    DFloat dx = DFloat::from(x), out = DFloat::poisoned(int64_t(rows) * cols);
    ops::transpose(dx.get(), out.get(), rows, cols, stream());
    return out.download({cols, rows});
}

py::array_t<int32_t> durations_from_logits(const FloatArray& logits, float speed) {
    require_ndim(logits, 2, "logits");
    const int T = dim(logits, 0);
    DFloat dl = DFloat::from(logits);
    DInt dur = DInt::poisoned(T);
    ops::durations_from_logits(dl.get(), T, dim(logits, 1), speed, dur.get(), stream());
    return dur.download({T});
}

py::array_t<int32_t> frame_token_index(const IntArray& dur) {
    const int T = int(dur.size());
    int64_t F = 0;
    for (int t = 0; t < T; ++t) F += dur.data()[t];
    DInt dd = DInt::from(dur), ft = DInt::poisoned(F);
    ops::frame_token_index(dd.get(), T, ft.get(), stream());
    return ft.download({py::ssize_t(F)});
}

// rows: x time-major [T, C] -> [F, C] (expand_frame_rows); else [C, T] -> [C, F].
py::array_t<float> expand_frames(const FloatArray& x, const IntArray& frame_token, bool rows) {
    require_ndim(x, 2, "x");
    const int C = dim(x, rows ? 1 : 0), T = dim(x, rows ? 0 : 1), F = int(frame_token.size());
    DFloat dx = DFloat::from(x), out = DFloat::poisoned(int64_t(C) * F);
    DInt dft = DInt::from(frame_token);
    if (rows) {
        ops::expand_frame_rows(dx.get(), dft.get(), out.get(), C, F, stream());
        return out.download({F, C});
    }
    ops::expand_frames(dx.get(), dft.get(), out.get(), C, T, F, stream());
    return out.download({C, F});
}

py::array_t<float> upsample_nearest(const FloatArray& x, int scale) {
    require_ndim(x, 2, "x");
    const int C = dim(x, 0), T = dim(x, 1);
    DFloat dx = DFloat::from(x), out = DFloat::poisoned(int64_t(C) * T * scale);
    ops::upsample_nearest(dx.get(), out.get(), C, T, scale, stream());
    return out.download({C, T * scale});
}

py::array_t<float> interpolate_linear(const FloatArray& x, double scale) {
    require_ndim(x, 2, "x");
    const int C = dim(x, 0), T = dim(x, 1), Tout = int(std::floor(T * scale));
    DFloat dx = DFloat::from(x), out = DFloat::poisoned(int64_t(C) * Tout);
    ops::interpolate_linear(dx.get(), out.get(), C, T, Tout, scale, stream());
    return out.download({C, Tout});
}

py::array_t<float> reflection_pad(const FloatArray& x, int left, int right) {
    require_ndim(x, 2, "x");
    const int C = dim(x, 0), T = dim(x, 1);
    require(left < T && right < T, "reflection_pad: padding must be shorter than the input");
    DFloat dx = DFloat::from(x), out = DFloat::poisoned(int64_t(C) * (left + T + right));
    ops::reflection_pad(dx.get(), out.get(), C, T, left, right, stream());
    return out.download({C, left + T + right});
}

// ------------------------------------------------------------------ norm
py::array_t<float> layer_norm(const FloatArray& x, bool channels_first, const OptionalFloat& gamma,
                              const OptionalFloat& beta, const OptionalFloat& style_gamma,
                              const OptionalFloat& style_beta, float eps, bool in_place,
                              const OptionalFloat& x_bias, int y_pitch) {
    require_ndim(x, 2, "x");
    const int a = dim(x, 0), b = dim(x, 1);
    require(!x_bias || (!channels_first && x_bias->ndim() == 1 && dim(*x_bias, 0) == b),
            "layer_norm: x_bias is a [cols] vector, rows only");
    require(y_pitch == 0 || (!channels_first && !in_place && y_pitch >= b),
            "layer_norm: y_pitch (rows only, not in place) must be at least cols");
    const int pitch = y_pitch > 0 ? y_pitch : b;
    DFloat dx = DFloat::from(x), y = DFloat::poisoned(in_place ? 0 : int64_t(a) * pitch);
    OptionalDevice g(gamma), be(beta), sg(style_gamma), sb(style_beta), xb(x_bias);
    float* out = in_place ? dx.get() : y.get();
    if (channels_first) {
        ops::layer_norm_channels(dx.get(), out, a, b, g.get(), be.get(), sg.get(), sb.get(), eps,
                                 stream());
    } else {
        ops::layer_norm_rows(dx.get(), out, a, b, g.get(), be.get(), sg.get(), sb.get(), eps,
                             stream(), xb.get(), y_pitch);
    }
    return (in_place ? dx : y).download({a, pitch});
}

// AdaIN (+ activation) in fp32, or as half rows from its own or the given
// statistics partials (x_half: x uploaded as FP16, which needs them);
// shared_gpu: called as a lane of a batch calls it.
py::array_t<float> adain(const FloatArray& x, const FloatArray& style, const std::string& act,
                         float slope, const OptionalFloat& alpha, bool in_place, bool half_rows,
                         bool split, const std::optional<DoubleArray>& partials, bool shared_gpu,
                         bool x_half) {
    const SharedGpu shared(shared_gpu);
    require_ndim(x, 2, "x");
    const int C = dim(x, 0), T = dim(x, 1);
    require(int(style.size()) == 2 * C, "adain: style must hold 2C values");
    ops::Activation activation = ops::Activation::kNone;
    if (act == "leaky_relu") {
        activation = ops::Activation::kLeakyRelu;
    } else if (act == "snake") {
        require(alpha.has_value(), "adain: snake needs alpha");
        activation = ops::Activation::kSnake;
    } else {
        require(act == "none", "adain: unknown activation " + act);
    }
    DFloat dx = DFloat::from(x), ds = DFloat::from(style);
    OptionalDevice da(alpha);
    DeviceArray<double> scratch(ops::adain_scratch_doubles(C, T));
    if (half_rows) {
        const int ld = ops::half_rows_pitch(C);
        const ops::HalfOperands form = half_form(split);
        auto rows = DeviceArray<__half>::poisoned(int64_t(ops::half_parts(form)) * T * ld);
        ops::ChannelPartials given{};
        std::optional<DeviceArray<double>> dp;
        if (partials) {
            require(partials->ndim() == 3 && dim(*partials, 0) == C &&
                        dim(*partials, 2) == ops::kPartialDoubles && dim(*partials, 1) > 0,
                    "adain: partials must be [C, parts > 0, 3]");
            dp.emplace(DeviceArray<double>::from(*partials));
            given = {dp->get(), dim(*partials, 1)};
        }
        std::optional<DeviceArray<__half>> dx16;
        if (x_half) dx16.emplace(upload_half_channels(x));
        ops::adain_half_rows(x_half ? ops::ConstFloatOrHalf(dx16->get()) : dx.get(), rows.get(), C,
                             T, ds.get(), activation, slope, da.get(), form, scratch.get(),
                             stream(), given);
        return download_half_rows(rows, T, ld, form);
    }
    require(!split && !partials && !x_half,
            "adain: split, partials and x_half apply to half_rows only");
    DFloat y = DFloat::poisoned(in_place ? 0 : int64_t(x.size()));
    float* out = in_place ? dx.get() : y.get();
    ops::adain(dx.get(), out, C, T, ds.get(), activation, slope, da.get(), scratch.get(), stream());
    return (in_place ? dx : y).download({C, T});
}

// x [C, T] as half rows [T, half_rows_pitch(C)] ([2, T, ld] when split),
// downloaded as float32; with `plus` (up to two more [C, T] tensors) and
// `scale`, of the ScaledSum ((x + plus[0]) + plus[1]) * scale (terms_half:
// every term uploaded as the engine's FP16 channels, rounded); through
// LeakyReLU(leaky_slope) where it is not 1.
py::array_t<float> to_half_rows(const FloatArray& x, bool split,
                                const std::vector<FloatArray>& plus, float scale,
                                float leaky_slope, bool terms_half) {
    require_ndim(x, 2, "x");
    require(plus.size() <= 2, "to_half_rows: at most two more terms");
    const int C = dim(x, 0), T = dim(x, 1), ld = ops::half_rows_pitch(C);
    std::vector<const FloatArray*> given{&x};
    for (const FloatArray& p : plus) {
        require(p.ndim() == 2 && dim(p, 0) == C && dim(p, 1) == T,
                "to_half_rows: every term must have x's shape");
        given.push_back(&p);
    }
    std::vector<DFloat> terms;
    std::vector<DeviceArray<__half>> half_terms;
    for (const FloatArray* t : given) {
        if (terms_half) {
            half_terms.push_back(upload_half_channels(*t));
        } else {
            terms.push_back(DFloat::from(*t));
        }
    }
    auto half = [&](size_t i) { return i < half_terms.size() ? half_terms[i].get() : nullptr; };
    auto full = [&](size_t i) { return i < terms.size() ? terms[i].get() : nullptr; };
    const ops::ScaledSum sum = terms_half ? ops::ScaledSum(half(0), half(1), scale, half(2))
                                          : ops::ScaledSum(full(0), full(1), scale, full(2));
    const ops::HalfOperands form = half_form(split);
    auto rows = DeviceArray<__half>::poisoned(int64_t(ops::half_parts(form)) * T * ld);
    ops::to_half_rows(sum, rows.get(), C, T, form, stream(), leaky_slope);
    return download_half_rows(rows, T, ld, form);
}

// ------------------------------------------------------------------ conv
// "fp32" / "tf32": ops::conv1d in that GemmMath; "fp16" / "fp16x3": the
// tensor-core conv1d_half_rows on rounded / split operands (x converted by
// to_half_rows first) with its best kernel here; the suffix "_mma_sync"
// forces its mma.sync kernel.
struct HalfMath {
    ops::HalfOperands form;
    ops::HalfKernel kernel;
};
std::optional<HalfMath> half_math(const std::string& math) {
    const std::string suffix = "_mma_sync";
    const bool mma_sync = math.size() > suffix.size() &&
                          math.compare(math.size() - suffix.size(), suffix.size(), suffix) == 0;
    const std::string base = mma_sync ? math.substr(0, math.size() - suffix.size()) : math;
    const ops::HalfKernel kernel = half_kernel(mma_sync);
    if (base == "fp16") return HalfMath{ops::HalfOperands::kRounded, kernel};
    if (base == "fp16x3") return HalfMath{ops::HalfOperands::kSplit, kernel};
    return std::nullopt;
}
ops::GemmMath gemm_math(const std::string& math) {
    if (math == "fp32") return ops::GemmMath::kFp32;
    require(math == "tf32", "unknown math " + math +
                                " (fp32, tf32, fp16, fp16x3, fp16_mma_sync or fp16x3_mma_sync)");
    return ops::GemmMath::kTf32;
}

// The input of the fp16 paths: x uploaded and converted to half rows
// (through LeakyReLU(leaky_slope) where it is not 1).
// The buffer holds at least `capacity` rows (more than T: the rest poisoned).
DeviceArray<__half> half_rows_input(const FloatArray& x, ops::HalfOperands form,
                                    float leaky_slope = 1.f, int capacity = 0) {
    const int C = dim(x, 0), T = dim(x, 1);
    DFloat dx = DFloat::from(x);
    auto rows = DeviceArray<__half>::poisoned(int64_t(ops::half_parts(form)) *
                                             std::max(T, capacity) * ops::half_rows_pitch(C));
    ops::to_half_rows(dx.get(), rows.get(), C, T, form, stream(), leaky_slope);
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream()));  // before dx goes
    return rows;
}

// The fp16 paths' setup: x as half rows and w as FP16 (with its scale) in
// the math's form, the split-sum scratch, and the call on them.
struct HalfConv {
    HalfMath math;
    int Cin, Cout, Tin, K, pad, dilation;
    DeviceArray<__half> rows;
    HalfWeight w;
    DFloat scratch;

    HalfConv(const FloatArray& x, const FloatArray& w_, int pad_, int dilation_, HalfMath m)
        : math(m),
          Cin(dim(x, 0)),
          Cout(dim(w_, 0)),
          Tin(dim(x, 1)),
          K(dim(w_, 2)),
          pad(pad_),
          dilation(dilation_),
          rows(half_rows_input(x, m.form)),
          w(conv_weight_half(w_, m.form)),
          scratch(ops::conv1d_half_rows_scratch_floats(Cin, Cout, Tin, K, pad, dilation, m.form)) {}
    void operator()(const float* b, ops::FloatOrHalf y, ops::ConstFloatOrHalf residual,
                    double* stats = nullptr, float out_scale = 1.f) const {
        ops::conv1d_half_rows(rows.get(), w.w.get(), w.scale, b, y, Cin, Cout, Tin, K, pad,
                              dilation, residual, math.form, scratch.get(), stream(), math.kernel,
                              stats, 1, out_scale);
    }
};

py::array_t<float> conv1d(const FloatArray& x, const FloatArray& w, const OptionalFloat& b,
                          int stride, int pad, int dilation, int groups,
                          const OptionalFloat& residual, bool residual_in_place,
                          const std::string& math) {
    require_ndim(x, 2, "x");
    require_ndim(w, 3, "w");
    const int Cin = dim(x, 0), Tin = dim(x, 1), Cout = dim(w, 0), K = dim(w, 2);
    require(dim(w, 1) * groups == Cin && Cout % groups == 0, "conv1d: w does not match x, groups");
    const int Tout = ops::conv1d_out_len(Tin, K, stride, pad, dilation);
    require(Tout > 0, "conv1d: input too short");
    OptionalDevice db(b);
    const bool res_into_y = residual && residual_in_place;
    DFloat y = res_into_y ? DFloat::from(*residual) : DFloat::poisoned(int64_t(Cout) * Tout);
    OptionalDevice dres(res_into_y ? OptionalFloat() : residual);
    const float* res_ptr = res_into_y ? y.get() : dres.get();
    if (const std::optional<HalfMath> hm = half_math(math)) {
        require(stride == 1 && groups == 1, "conv1d fp16: dense, stride 1 only");
        HalfConv(x, w, pad, dilation, *hm)(db.get(), y.get(), res_ptr);
        return y.download({Cout, Tout});
    }
    DFloat dx = DFloat::from(x), dw = conv_weight(w);
    DFloat scratch(ops::conv1d_scratch_floats(Cin, Cout, Tin, K, stride, pad, dilation, groups));
    ops::conv1d(context().blas, dx.get(), dw.get(), db.get(), y.get(), Cin, Cout, Tin, K, stride,
                pad, dilation, groups, res_ptr, scratch.get(), stream(), gemm_math(math));
    return y.download({Cout, Tout});
}

// Fast precision's 1x1 block shortcuts of the decoder and the N stack
// (Context::conv1x1_half): x [Cin, T] rounded into half rows, w [Cout, Cin,
// 1] as the engine uploads it, the tensor-core conv at K = 1 into FP16
// channels; y [Cout, T] as their values.
py::array_t<float> conv1x1_half(const FloatArray& x, const FloatArray& w) {
    require_ndim(x, 2, "x");
    require_ndim(w, 3, "w");
    const int Cin = dim(x, 0), T = dim(x, 1), Cout = dim(w, 0);
    require(dim(w, 1) == Cin && dim(w, 2) == 1, "conv1x1_half: w must be [Cout, Cin, 1]");
    const HalfConv conv(x, w, 0, 1, {ops::HalfOperands::kRounded, ops::HalfKernel::kBest});
    auto y = DeviceArray<__half>::poisoned(ops::half_channels_values(Cout, T));
    conv(nullptr, y.get(), nullptr);
    return download_half_channels(y, Cout, T);
}

// (y [Cout, Tout], its statistics partials [Cout, parts, 3]) of conv(y) into
// a y of fp32 or (half_out) FP16 channels.
template <typename Conv>
py::tuple conv_out(int Cout, int Tout, int parts, const DeviceArray<double>& stats,
                   bool half_out, Conv conv) {
    if (half_out) {
        auto y16 = DeviceArray<__half>::poisoned(ops::half_channels_values(Cout, Tout));
        conv(y16.get());
        return py::make_tuple(download_half_channels(y16, Cout, Tout),
                              stats.download({Cout, parts, ops::kPartialDoubles}));
    }
    DFloat y = DFloat::poisoned(int64_t(Cout) * Tout);
    conv(y.get());
    return py::make_tuple(y.download({Cout, Tout}),
                          stats.download({Cout, parts, ops::kPartialDoubles}));
}

// A tensor-core conv's residual [Cout, Tout] on the device (none: null), as
// fp32 or (half) as the engine's FP16 channels (upload_half_channels).
struct DeviceResidual {
    OptionalDevice f32;
    std::optional<DeviceArray<__half>> f16;
    DeviceResidual(const OptionalFloat& residual, bool half, const char* fn, int Cout, int Tout)
        : f32(half ? OptionalFloat() : residual) {
        require(!residual || (residual->ndim() == 2 && dim(*residual, 0) == Cout &&
                              dim(*residual, 1) == Tout),
                std::string(fn) + ": residual must be [Cout, Tout]");
        require(!half || residual, std::string(fn) + ": residual_half needs a residual");
        if (half) f16.emplace(upload_half_channels(*residual));
    }
    ops::ConstFloatOrHalf get() const {
        return f16 ? ops::ConstFloatOrHalf(f16->get()) : ops::ConstFloatOrHalf(f32.get());
    }
};

// A conv with its statistics partials of y: (y [Cout, Tout], partials [Cout,
// parts, 3] float64): the tensor-core conv ("fp16" / "fp16x3" maths), y =
// (conv + b + residual) * out_scale, or a pointwise conv of few input
// channels ("fp32" / "tf32": the fp32 pass that writes them, out_scale 1).
// shared_gpu: called as a lane of a batch calls it (SharedGpu); half_out: y
// stored as FP16, residual_half: the residual uploaded as FP16 (tensor-core
// convs).
py::tuple conv1d_stats(const FloatArray& x, const FloatArray& w, const OptionalFloat& b, int pad,
                       int dilation, const OptionalFloat& residual, const std::string& math,
                       float out_scale, bool shared_gpu, bool half_out, bool residual_half) {
    const SharedGpu shared(shared_gpu);
    require_ndim(x, 2, "x");
    require_ndim(w, 3, "w");
    const int Cin = dim(x, 0), Tin = dim(x, 1), Cout = dim(w, 0), K = dim(w, 2);
    require(dim(w, 1) == Cin, "conv1d_stats: w does not match x");
    const int Tout = ops::conv1d_out_len(Tin, K, 1, pad, dilation);
    require(Tout > 0, "conv1d_stats: input too short");
    const DeviceResidual res(residual, residual_half, "conv1d_stats", Cout, Tout);
    OptionalDevice db(b);
    const std::optional<HalfMath> hm = half_math(math);
    if (!hm) {
        require(!half_out && !residual_half,
                "conv1d_stats: half_out and residual_half need a tensor-core math (fp16, fp16x3)");
        const int parts = ops::conv1d_stats_parts(Cin, Cout, Tin, K, 1, pad, 1);
        require(parts > 0 && out_scale == 1.f,
                "conv1d_stats: an fp32 conv writes them only when pointwise with few input "
                "channels, out_scale 1");
        auto stats = DeviceArray<double>::poisoned(int64_t(Cout) * parts * ops::kPartialDoubles);
        DFloat dx = DFloat::from(x), dw = conv_weight(w);
        DFloat y = DFloat::poisoned(int64_t(Cout) * Tout);
        ops::conv1d(context().blas, dx.get(), dw.get(), db.get(), y.get(), Cin, Cout, Tin, K, 1,
                    pad, dilation, 1, res.f32.get(), nullptr, stream(), gemm_math(math),
                    stats.get());
        return py::make_tuple(y.download({Cout, Tout}),
                              stats.download({Cout, parts, ops::kPartialDoubles}));
    }
    const int parts =
        ops::conv1d_half_rows_stats_parts(Cin, Cout, Tin, K, pad, dilation, hm->form);
    auto stats = DeviceArray<double>::poisoned(int64_t(Cout) * parts * ops::kPartialDoubles);
    double* const stats_out = parts > 0 ? stats.get() : nullptr;
    const HalfConv conv(x, w, pad, dilation, *hm);
    return conv_out(Cout, Tout, parts, stats, half_out, [&](ops::FloatOrHalf y) {
        conv(db.get(), y, res.get(), stats_out, out_scale);
    });
}

// ops::conv1d_strided_half_rows (the fast generator's strided noise convs):
// x [Cin, Tin] rounded into half rows (the rows past Tin poisoned: the op
// zeroes them), w [Cout, Cin, K] as the engine uploads it (polyphase); (y
// [Cout, Tout], its statistics partials [Cout, parts, 3]) as conv1d_stats's.
py::tuple conv1d_strided_half(const FloatArray& x, const FloatArray& w, const OptionalFloat& b,
                              int stride, int pad, bool shared_gpu) {
    const SharedGpu shared(shared_gpu);
    require_ndim(x, 2, "x");
    require_ndim(w, 3, "w");
    const int Cin = dim(x, 0), Tin = dim(x, 1), Cout = dim(w, 0), K = dim(w, 2);
    require(dim(w, 1) == Cin, "conv1d_strided_half: w does not match x");
    const int Tout = ops::conv1d_out_len(Tin, K, stride, pad, 1);
    require(Tout > 0, "conv1d_strided_half: input too short");
    const DeviceArray<__half> rows =
        half_rows_input(x, ops::HalfOperands::kRounded, 1.f,
                        ops::conv1d_strided_input_rows(Tin, stride));
    std::vector<__half> host(
        size_t(ops::conv_weight_polyphase_halves(Cout, K, Cin, stride, pad)));
    const float scale = ops::conv_weight_to_polyphase_half_rows(
        relaid_conv_weight(w).data(), host.data(), Cout, K, Cin, stride, pad);
    const DeviceArray<__half> hw = upload_halves(host);
    OptionalDevice db(b);
    DFloat scratch(ops::conv1d_strided_half_rows_scratch_floats(Cin, Cout, Tin, K, stride, pad));
    const int parts = ops::conv1d_strided_half_rows_stats_parts(Cin, Cout, Tin, K, stride, pad);
    auto stats = DeviceArray<double>::poisoned(int64_t(Cout) * parts * ops::kPartialDoubles);
    return conv_out(Cout, Tout, parts, stats, false, [&](ops::FloatOrHalf y) {
        ops::conv1d_strided_half_rows(rows.get(), hw.get(), scale, db.get(),
                                      y.f32, Cin, Cout, Tin, K, stride, pad, nullptr,
                                      scratch.get(), stream(), parts > 0 ? stats.get() : nullptr);
    });
}

// A conv1d on the tensor cores that takes its input raw (ops::HalfInput): x
// uploaded as FP16 [Cin, Tin], its AdaIN (style, Snake's alpha) from its
// statistics partials, as a residual block's second conv does (rounded
// operands); y, residual and the returns as conv1d_stats's. Errors where
// the conv cannot (conv1d_takes_raw_input).
py::tuple conv1d_raw(const FloatArray& x, const DoubleArray& partials, const FloatArray& style,
                     const FloatArray& alpha, const FloatArray& w, const OptionalFloat& b,
                     int pad, int dilation, const OptionalFloat& residual, bool half_out,
                     bool residual_half) {
    require_ndim(x, 2, "x");
    require_ndim(w, 3, "w");
    const int Cin = dim(x, 0), Tin = dim(x, 1), Cout = dim(w, 0), K = dim(w, 2);
    require(dim(w, 1) == Cin, "conv1d_raw: w does not match x");
    require(int(style.size()) == 2 * Cin && int(alpha.size()) == Cin,
            "conv1d_raw: style must hold 2 Cin values, alpha Cin");
    require(partials.ndim() == 3 && dim(partials, 0) == Cin &&
                dim(partials, 2) == ops::kPartialDoubles && dim(partials, 1) > 0,
            "conv1d_raw: partials must be [Cin, parts > 0, 3]");
    const int Tout = ops::conv1d_out_len(Tin, K, 1, pad, dilation);
    require(Tout > 0 && K >= 2, "conv1d_raw: K >= 2 and an input long enough");
    const DeviceResidual res(residual, residual_half, "conv1d_raw", Cout, Tout);
    const ops::HalfOperands form = ops::HalfOperands::kRounded;
    require(ops::conv1d_takes_raw_input(Cin, Cout, Tin, K, pad, dilation, form),
            "conv1d_raw: this conv cannot take a raw input here (conv1d_takes_raw_input)");
    const DeviceArray<__half> x16 = upload_half_channels(x);
    const DeviceArray<double> dp = DeviceArray<double>::from(partials);
    const DFloat ds = DFloat::from(style), da = DFloat::from(alpha);
    DeviceArray<double> adain_scratch(ops::adain_scratch_doubles(Cin, Tin));
    const HalfWeight hw = conv_weight_half(w, form);
    OptionalDevice db(b);
    const int parts = ops::conv1d_half_rows_stats_parts(Cin, Cout, Tin, K, pad, dilation, form);
    auto stats = DeviceArray<double>::poisoned(int64_t(Cout) * parts * ops::kPartialDoubles);
    const ops::ChannelApply* apply =
        ops::adain_apply({dp.get(), dim(partials, 1)}, Cin, Tin, ds.get(),
                         ops::Activation::kSnake, 0.f, da.get(), form, adain_scratch.get(),
                         stream());
    return conv_out(Cout, Tout, parts, stats, half_out, [&](ops::FloatOrHalf y) {
        ops::conv1d_half_rows(ops::HalfInput(x16.get(), apply), hw.w.get(), hw.scale, db.get(), y,
                              Cin, Cout, Tin, K, pad, dilation, res.get(), form, nullptr, stream(),
                              ops::HalfKernel::kBest, stats.get());
    });
}

// Milliseconds per call of `call`, from CUDA events around `repeats` calls
// after one untimed call.
template <typename Call>
double time_ms(Call call, int repeats) {
    struct Events {
        cudaEvent_t start = nullptr, stop = nullptr;
        ~Events() {
            (void)cudaEventDestroy(start);  // destructors cannot throw
            (void)cudaEventDestroy(stop);
        }
    } ev;
    KOKORO_CUDA_CHECK(cudaEventCreate(&ev.start));
    KOKORO_CUDA_CHECK(cudaEventCreate(&ev.stop));
    call();
    KOKORO_CUDA_CHECK(cudaEventRecord(ev.start, stream()));
    for (int i = 0; i < repeats; ++i) call();
    KOKORO_CUDA_CHECK(cudaEventRecord(ev.stop, stream()));
    KOKORO_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0.f;
    KOKORO_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    return double(ms) / repeats;
}

// Benchmark helper: milliseconds per call of a dense stride-1 conv1d with
// bias on device-resident inputs (for "fp16" already in half rows).
double conv1d_time_ms(const FloatArray& x, const FloatArray& w, const FloatArray& b, int pad,
                      int dilation, const std::string& math, int repeats) {
    require_ndim(x, 2, "x");
    require_ndim(w, 3, "w");
    const int Cin = dim(x, 0), Tin = dim(x, 1), Cout = dim(w, 0), K = dim(w, 2);
    require(dim(w, 1) == Cin && dim(b, 0) == Cout, "conv1d_time_ms: w, b do not match x");
    require(repeats > 0, "conv1d_time_ms: repeats must be positive");
    const int Tout = ops::conv1d_out_len(Tin, K, 1, pad, dilation);
    require(Tout > 0, "conv1d_time_ms: input too short");
    DFloat db = DFloat::from(b);
    DFloat y = DFloat::poisoned(int64_t(Cout) * Tout);
    if (const std::optional<HalfMath> hm = half_math(math)) {
        const HalfConv conv(x, w, pad, dilation, *hm);
        return time_ms([&] { conv(db.get(), y.get(), nullptr); }, repeats);
    }
    DFloat dx = DFloat::from(x), dw = conv_weight(w);
    DFloat scratch(ops::conv1d_scratch_floats(Cin, Cout, Tin, K, 1, pad, dilation, 1));
    const ops::GemmMath m = gemm_math(math);
    return time_ms(
        [&] {
            ops::conv1d(context().blas, dx.get(), dw.get(), db.get(), y.get(), Cin, Cout, Tin, K,
                        1, pad, dilation, 1, nullptr, scratch.get(), stream(), m);
        },
        repeats);
}

py::array_t<float> conv_transpose1d(const FloatArray& x, const FloatArray& w, const OptionalFloat& b,
                                    int stride, int pad, int output_padding, int groups) {
    require_ndim(x, 2, "x");
    require_ndim(w, 3, "w");
    const int Cin = dim(x, 0), Tin = dim(x, 1), Cout = dim(w, 1) * groups, K = dim(w, 2);
    require(dim(w, 0) == Cin && Cin % groups == 0, "conv_transpose1d: w does not match x, groups");
    const int Tout = ops::conv_transpose1d_out_len(Tin, K, stride, pad, output_padding);
    DFloat dx = DFloat::from(x), dw = conv_weight(w), y = DFloat::poisoned(int64_t(Cout) * Tout);
    OptionalDevice db(b);
    DFloat scratch(ops::conv_transpose1d_scratch_floats(Cin, Cout, Tin, K, groups));
    ops::conv_transpose1d(context().blas, dx.get(), dw.get(), db.get(), y.get(), Cin, Cout, Tin, K,
                          stride, pad, output_padding, groups, scratch.get(), stream());
    return y.download({Cout, Tout});
}

// ops::conv_transpose1d_depthwise_half_rows: the depthwise transposed conv
// (w [C, 1, K]) of x [C, Tin] as half rows [Tout, ld] ([2, Tout, ld] when
// split), downloaded as float32.
py::array_t<float> conv_transpose1d_depthwise_half(const FloatArray& x, const FloatArray& w,
                                                   const OptionalFloat& b, int stride, int pad,
                                                   int output_padding, bool split) {
    require_ndim(x, 2, "x");
    require_ndim(w, 3, "w");
    const int C = dim(x, 0), Tin = dim(x, 1), K = dim(w, 2);
    require(dim(w, 0) == C && dim(w, 1) == 1,
            "conv_transpose1d_depthwise_half: w must be [C, 1, K]");
    const int Tout = ops::conv_transpose1d_out_len(Tin, K, stride, pad, output_padding);
    require(Tout > 0, "conv_transpose1d_depthwise_half: no output steps");
    const ops::HalfOperands form = half_form(split);
    const int ld = ops::half_rows_pitch(C);
    DFloat dx = DFloat::from(x), dw = conv_weight(w);
    OptionalDevice db(b);
    auto rows = DeviceArray<__half>::poisoned(int64_t(ops::half_parts(form)) * Tout * ld);
    ops::conv_transpose1d_depthwise_half_rows(dx.get(), dw.get(), db.get(), rows.get(), C, Tin, K,
                                              stride, pad, output_padding, form, stream());
    return download_half_rows(rows, Tout, ld, form);
}

// The polyphase tensor-core transposed conv ("fp16" / "fp16x3" maths, the
// "_mma_sync" suffix too), dense: y = pad(conv_transpose(act(x)) + b) +
// residual, act = LeakyReLU(leaky_slope), pad the reflection pad
// (reflect_left, 0); returns (y, its statistics partials [Cout, parts, 3]
// float64; parts 0 where the reduction is split).
py::tuple conv_transpose1d_half(const FloatArray& x, const FloatArray& w, const OptionalFloat& b,
                                int stride, int pad, int reflect_left,
                                const OptionalFloat& residual, bool residual_in_place,
                                float leaky_slope, const std::string& math, bool half_out) {
    require_ndim(x, 2, "x");
    require_ndim(w, 3, "w");
    const int Cin = dim(x, 0), Tin = dim(x, 1), Cout = dim(w, 1), K = dim(w, 2);
    require(dim(w, 0) == Cin, "conv_transpose1d_half: w does not match x");
    const std::optional<HalfMath> hm = half_math(math);
    require(hm.has_value(), "conv_transpose1d_half: math must be a tensor-core one, not " + math);
    const int T = reflect_left + ops::conv_transpose1d_out_len(Tin, K, stride, pad, 0);
    require(!residual || (residual->ndim() == 2 && dim(*residual, 0) == Cout &&
                          dim(*residual, 1) == T),
            "conv_transpose1d_half: residual must be [Cout, reflect_left + Tout]");
    const ops::HalfOperands form = hm->form;
    const DeviceArray<__half> rows = half_rows_input(x, form, leaky_slope);
    std::vector<__half> host(size_t(ops::half_parts(form)) * K * Cout * ops::half_rows_pitch(Cin));
    const float scale = ops::conv_transpose_weight_to_half_rows(relaid_conv_weight(w).data(),
                                                                host.data(), Cin, K, Cout, form);
    const DeviceArray<__half> dw = upload_halves(host);
    require(!(half_out && residual_in_place),
            "conv_transpose1d_half: an FP16 y takes no residual in place");
    OptionalDevice db(b);
    const bool res_into_y = residual && residual_in_place;
    OptionalDevice dres(res_into_y ? OptionalFloat() : residual);
    DFloat scratch(ops::conv_transpose1d_half_rows_scratch_floats(Cin, Cout, Tin, K, stride, pad,
                                                                  form));
    const int parts = ops::conv_transpose1d_half_rows_stats_parts(Cin, Cout, Tin, K, stride, pad,
                                                                  reflect_left, form);
    auto stats = DeviceArray<double>::poisoned(int64_t(Cout) * parts * ops::kPartialDoubles);
    auto conv = [&](ops::FloatOrHalf y, const float* res) {
        ops::conv_transpose1d_half_rows(rows.get(), dw.get(), scale, db.get(), y, Cin, Cout, Tin,
                                        K, stride, pad, reflect_left, res, form, scratch.get(),
                                        stream(), hm->kernel, parts > 0 ? stats.get() : nullptr);
    };
    if (half_out) {
        return conv_out(Cout, T, parts, stats, true, [&](auto y) { conv(y, dres.get()); });
    }
    DFloat y = res_into_y ? DFloat::from(*residual) : DFloat::poisoned(int64_t(Cout) * T);
    conv(y.get(), res_into_y ? y.get() : dres.get());
    return py::make_tuple(y.download({Cout, T}),
                          stats.download({Cout, parts, ops::kPartialDoubles}));
}

// ------------------------------------------------------ lstm, attention
py::array_t<float> lstm_bidirectional(const FloatArray& x, const FloatArray& w_ih,
                                      const FloatArray& w_hh, const FloatArray& b,
                                      int max_cluster_blocks) {
    require_ndim(x, 2, "x");
    require_ndim(w_hh, 3, "w_hh");
    const int T = dim(x, 0), In = dim(x, 1), H = dim(w_hh, 2);
    require(int(w_ih.size()) == 8 * H * In && int(w_hh.size()) == 8 * H * H &&
                int(b.size()) == 8 * H,
            "lstm_bidirectional: weight shapes do not match");
    DFloat dx = DFloat::from(x), dwi = DFloat::from(w_ih), dwh = DFloat::from(w_hh);
    DFloat db = DFloat::from(b), out = DFloat::poisoned(int64_t(T) * 2 * H);
    DFloat scratch(ops::lstm_scratch_floats(T, H));
    ops::lstm_bidirectional(context().blas, dx.get(), dwi.get(), dwh.get(), db.get(), out.get(), T,
                            In, H, scratch.get(), stream(), max_cluster_blocks);
    return out.download({T, 2 * H});
}

// The recurrence alone on gx [rows, 8H], its rows `lengths` sequences
// stacked; shared_gpu: called as a lane of a batch calls it.
py::array_t<float> lstm_recurrence(const FloatArray& gx, const FloatArray& w_hh,
                                   const std::vector<int>& lengths, int max_cluster_blocks,
                                   bool shared_gpu) {
    const SharedGpu shared(shared_gpu);
    require_ndim(gx, 2, "gx");
    require_ndim(w_hh, 3, "w_hh");
    const int rows = dim(gx, 0), H = dim(w_hh, 2);
    require(dim(gx, 1) == 8 * H && int(w_hh.size()) == 8 * H * H,
            "lstm_recurrence: gx must be [rows, 8H] and w_hh [2, 4H, H]");
    int64_t total = 0;
    for (const int T : lengths) {
        require(T >= 0, "lstm_recurrence: lengths must not be negative");
        total += T;
    }
    require(total == rows, "lstm_recurrence: the lengths must add up to gx's rows");
    DFloat dgx = DFloat::from(gx), dwh = DFloat::from(w_hh);
    DFloat out = DFloat::poisoned(int64_t(rows) * 2 * H);
    ops::lstm_recurrence(dgx.get(), dwh.get(), out.get(), lengths, H, stream(),
                         max_cluster_blocks);
    return out.download({rows, 2 * H});
}

// packed: q, k, v go to the device as the column blocks of one [T, 3 * width]
// matrix (the engine's fused QKV projection), read at row pitch 3 * width.
// split: ops::attention_split_half on that packed matrix (with `bias`
// [3 * width], may be None; mma_sync: on that kernel, not the best).
py::array_t<float> attention(const FloatArray& q, const FloatArray& k, const FloatArray& v, int heads,
                             int valid_len, bool packed, bool split, const OptionalFloat& bias,
                             bool mma_sync) {
    require_ndim(q, 2, "q");
    const int T = dim(q, 0), width = dim(q, 1);
    require(width % heads == 0 && k.size() == q.size() && v.size() == q.size(),
            "attention: shapes do not match");
    require(!bias || (split && int(bias->size()) == 3 * width),
            "attention: a bias [3 * width] goes with split=True");
    DFloat out = DFloat::poisoned(int64_t(T) * width);
    DFloat scratch = DFloat::poisoned(ops::attention_scratch_floats(T, heads));
    if (packed || split) {
        DFloat d(int64_t(T) * 3 * width);
        const float* parts[3] = {q.data(), k.data(), v.data()};
        const size_t row = sizeof(float) * width;
        for (int p = 0; p < 3; ++p) {
            KOKORO_CUDA_CHECK(cudaMemcpy2DAsync(d.get() + p * width, 3 * row, parts[p], row, row,
                                                size_t(T), cudaMemcpyHostToDevice, stream()));
        }
        if (split) {
            OptionalDevice db(bias);
            auto halves = DeviceArray<__half>::poisoned(
                ops::attention_split_half_scratch_halves(T, heads, width / heads));
            ops::attention_split_half(d.get(), db.get(), out.get(), T, heads, width / heads,
                                      valid_len, scratch.get(), halves.get(), stream(),
                                      half_kernel(mma_sync));
        } else {
            ops::attention(context().blas, d.get(), d.get() + width, d.get() + 2 * width,
                           out.get(), T, heads, width / heads, 3 * width, valid_len,
                           scratch.get(), stream());
        }
        return out.download({T, width});
    }
    DFloat dq = DFloat::from(q), dk = DFloat::from(k), dv = DFloat::from(v);
    ops::attention(context().blas, dq.get(), dk.get(), dv.get(), out.get(), T, heads,
                   width / heads, width, valid_len, scratch.get(), stream());
    return out.download({T, width});
}

// ------------------------------------------------------- stft, source
py::array_t<float> stft_mag_phase(const FloatArray& x, int n_fft, int hop) {
    const int n = int(x.size());
    ops::Stft stft(n_fft, hop);
    const int frames = stft.frames(n), bins = n_fft / 2 + 1;
    DFloat dx = DFloat::from(x), out = DFloat::poisoned(int64_t(2) * bins * frames);
    stft.forward(dx.get(), n, out.get(), stream());
    return out.download({2 * bins, frames});
}

py::array_t<float> istft_from_logits(const FloatArray& logits, int n_fft, int hop) {
    require_ndim(logits, 2, "logits");
    require(dim(logits, 0) == 2 * (n_fft / 2 + 1), "istft_from_logits: wrong channel count");
    const int frames = dim(logits, 1), n = hop * (frames - 1);
    ops::Stft stft(n_fft, hop);
    DFloat dl = DFloat::from(logits), out = DFloat::poisoned(n);
    stft.inverse_from_logits(dl.get(), frames, out.get(), stream());
    return out.download({n});
}

py::array_t<float> harmonic_source(const FloatArray& f0, int upp, const FloatArray& lin_w,
                                   const FloatArray& lin_b, std::optional<uint64_t> seed,
                                   int sample_rate, int n_harm, float sine_amp, float noise_std,
                                   float voiced_threshold) {
    const int Tf = int(f0.size());
    require(int(lin_w.size()) == n_harm && lin_b.size() == 1, "harmonic_source: l_linear shapes");
    DFloat df0 = DFloat::from(f0), dw = DFloat::from(lin_w), db = DFloat::from(lin_b);
    DFloat out = DFloat::poisoned(int64_t(Tf) * upp);
    DeviceArray<double> scratch(ops::harmonic_source_scratch_doubles(Tf, upp, n_harm));
    DeviceArray<uint64_t> seed_dev = DeviceArray<uint64_t>::from(
        py::array_t<uint64_t>(py::ssize_t(1), std::vector<uint64_t>{seed.value_or(0)}.data()));
    ops::harmonic_source(df0.get(), Tf, upp, n_harm, sample_rate, sine_amp, noise_std,
                         voiced_threshold, dw.get(), db.get(), !seed.has_value(), seed_dev.get(),
                         out.get(), scratch.get(), stream());
    return out.download({py::ssize_t(Tf) * upp});
}

}  // namespace

void register_ops(py::module_& m) {
    using namespace py::literals;
    py::module_ o = m.def_submodule(
        "ops", "Test bindings of the CUDA ops: NumPy in, NumPy out (outputs poisoned with NaN first).");
    o.def("matmul", &matmul, "a"_a, "b"_a, "trans_a"_a = false, "trans_b"_a = false);
    o.def("linear", &linear, "x"_a, "w"_a, "b"_a = py::none(), "y0"_a = py::none(), "beta"_a = 0.f,
          "split"_a = false, "mma_sync"_a = false, "stacked"_a = py::none());
    o.def("albert_embeddings", &albert_embeddings, "ids"_a, "word"_a, "pos"_a = py::none(),
          "type0"_a = py::none(), "positions"_a = py::none());
    o.def("gelu_new", &gelu_new, "x"_a, "bias"_a = py::none());
    o.def("albert_ffn", &albert_ffn, "x"_a, "w1"_a, "b1"_a, "w2"_a);
    o.def("leaky_relu", &leaky_relu, "x"_a, "slope"_a, "in_place"_a = false);
    o.def("add_scaled", &add_scaled, "a"_a, "b"_a, "scale"_a);
    o.def("copy_rows", &copy_rows, "src"_a, "src_col"_a, "dst"_a, "dst_col"_a, "cols"_a);
    o.def("transpose", &transpose, "x"_a);
    o.def("durations_from_logits", &durations_from_logits, "logits"_a, "speed"_a);
    o.def("frame_token_index", &frame_token_index, "dur"_a);
    o.def("expand_frames", &expand_frames, "x"_a, "frame_token"_a, "rows"_a = false);
    o.def("upsample_nearest", &upsample_nearest, "x"_a, "scale"_a);
    o.def("interpolate_linear", &interpolate_linear, "x"_a, "scale"_a);
    o.def("reflection_pad", &reflection_pad, "x"_a, "left"_a, "right"_a);
    o.def("layer_norm", &layer_norm, "x"_a, "channels_first"_a = false, "gamma"_a = py::none(),
          "beta"_a = py::none(), "style_gamma"_a = py::none(), "style_beta"_a = py::none(),
          "eps"_a = 1e-5f, "in_place"_a = false, "x_bias"_a = py::none(), "y_pitch"_a = 0);
    o.def("adain", &adain, "x"_a, "style"_a, "act"_a = "none", "slope"_a = 0.2f,
          "alpha"_a = py::none(), "in_place"_a = false, "half_rows"_a = false, "split"_a = false,
          "partials"_a = py::none(), "shared_gpu"_a = false, "x_half"_a = false);
    o.def("to_half_rows", &to_half_rows, "x"_a, "split"_a = false,
          "plus"_a = std::vector<FloatArray>(), "scale"_a = 1.f, "leaky_slope"_a = 1.f,
          "terms_half"_a = false);
    o.def("conv1d", &conv1d, "x"_a, "w"_a, "b"_a = py::none(), "stride"_a = 1, "pad"_a = 0,
          "dilation"_a = 1, "groups"_a = 1, "residual"_a = py::none(),
          "residual_in_place"_a = false, "math"_a = "fp32");
    o.def("conv1x1_half", &conv1x1_half, "x"_a, "w"_a);
    o.def("conv1d_strided_half", &conv1d_strided_half, "x"_a, "w"_a, "b"_a = py::none(),
          "stride"_a = 2, "pad"_a = 0, "shared_gpu"_a = false);
    o.def("conv1d_stats", &conv1d_stats, "x"_a, "w"_a, "b"_a = py::none(), "pad"_a = 0,
          "dilation"_a = 1, "residual"_a = py::none(), "math"_a = "fp16", "out_scale"_a = 1.f,
          "shared_gpu"_a = false, "half_out"_a = false, "residual_half"_a = false);
    o.def("conv1d_raw", &conv1d_raw, "x"_a, "partials"_a, "style"_a, "alpha"_a, "w"_a,
          "b"_a = py::none(), "pad"_a = 0, "dilation"_a = 1, "residual"_a = py::none(),
          "half_out"_a = false, "residual_half"_a = false);
    o.def("conv1d_takes_raw_input", [](int c_in, int c_out, int t_in, int k, int pad,
                                       int dilation) {
        return ops::conv1d_takes_raw_input(c_in, c_out, t_in, k, pad, dilation,
                                           ops::HalfOperands::kRounded);
    });
    o.def("conv1d_time_ms", &conv1d_time_ms, "x"_a, "w"_a, "b"_a, "pad"_a, "dilation"_a,
          "math"_a = "fp16", "repeats"_a = 20);
    o.def("conv_transpose1d", &conv_transpose1d, "x"_a, "w"_a, "b"_a = py::none(), "stride"_a = 1,
          "pad"_a = 0, "output_padding"_a = 0, "groups"_a = 1);
    o.def("conv_transpose1d_depthwise_half", &conv_transpose1d_depthwise_half, "x"_a, "w"_a,
          "b"_a = py::none(), "stride"_a = 2, "pad"_a = 1, "output_padding"_a = 1,
          "split"_a = false);
    o.def("conv_transpose1d_half", &conv_transpose1d_half, "x"_a, "w"_a, "b"_a = py::none(),
          "stride"_a = 1, "pad"_a = 0, "reflect_left"_a = 0, "residual"_a = py::none(),
          "residual_in_place"_a = false, "leaky_slope"_a = 1.f, "math"_a = "fp16",
          "half_out"_a = false);
    o.def("lstm_bidirectional", &lstm_bidirectional, "x"_a, "w_ih"_a, "w_hh"_a, "b"_a,
          "max_cluster_blocks"_a = 16);
    o.def("lstm_recurrence", &lstm_recurrence, "gx"_a, "w_hh"_a, "lengths"_a,
          "max_cluster_blocks"_a = 16, "shared_gpu"_a = false);
    o.def("attention", &attention, "q"_a, "k"_a, "v"_a, "heads"_a, "valid_len"_a,
          "packed"_a = false, "split"_a = false, "bias"_a = py::none(), "mma_sync"_a = false);
    o.def("stft_mag_phase", &stft_mag_phase, "x"_a, "n_fft"_a = 20, "hop"_a = 5);
    o.def("istft_from_logits", &istft_from_logits, "logits"_a, "n_fft"_a = 20, "hop"_a = 5);
    o.def("harmonic_source", &harmonic_source, "f0"_a, "upp"_a, "lin_w"_a, "lin_b"_a,
          "seed"_a = py::none(), "sample_rate"_a = 24000, "n_harm"_a = 9, "sine_amp"_a = 0.1f,
          "noise_std"_a = 0.003f, "voiced_threshold"_a = 10.f);
}

}  // namespace kokoro
