// The ops' test bindings, conv (ops_bindings.cpp).
#include "common.h"

namespace kokoro::test_ops {

namespace {

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
        // Named, so that its buffers outlive the download's wait: freeing device memory need
        // not wait for work on a non-blocking stream.
        const HalfConv conv(x, w, pad, dilation, *hm);
        conv(db.get(), y.get(), res_ptr);
        return y.download({Cout, Tout});
    }
    DFloat dx = DFloat::from(x), dw = conv_weight(w);
    DFloat scratch(ops::conv1d_scratch_floats(Cin, Cout, Tin, K, stride, pad, dilation, groups));
    ops::conv1d(context().blas, dx.get(), dw.get(), db.get(), y.get(), Cin, Cout, Tin, K, stride,
                pad, dilation, groups, res_ptr, scratch.get(), stream(), gemm_math(math));
    return y.download({Cout, Tout});
}

// Fast precision's 1x1 block shortcuts of the decoder and the N stack
// (Conv1d::to_half_channels): x [Cin, T] rounded into half rows, w [Cout, Cin,
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

}  // namespace

void register_conv(py::module_& o) {
    using namespace py::literals;
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
}

}  // namespace kokoro::test_ops
