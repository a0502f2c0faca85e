// The ops' test bindings, norm (ops_bindings.cpp).
#include "common.h"

namespace kokoro::test_ops {

namespace {

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

}  // namespace

void register_norm(py::module_& o) {
    using namespace py::literals;
    o.def("layer_norm", &layer_norm, "x"_a, "channels_first"_a = false, "gamma"_a = py::none(),
          "beta"_a = py::none(), "style_gamma"_a = py::none(), "style_beta"_a = py::none(),
          "eps"_a = 1e-5f, "in_place"_a = false, "x_bias"_a = py::none(), "y_pitch"_a = 0);
    o.def("adain", &adain, "x"_a, "style"_a, "act"_a = "none", "slope"_a = 0.2f,
          "alpha"_a = py::none(), "in_place"_a = false, "half_rows"_a = false, "split"_a = false,
          "partials"_a = py::none(), "shared_gpu"_a = false, "x_half"_a = false);
    o.def("to_half_rows", &to_half_rows, "x"_a, "split"_a = false,
          "plus"_a = std::vector<FloatArray>(), "scale"_a = 1.f, "leaky_slope"_a = 1.f,
          "terms_half"_a = false);
}

}  // namespace kokoro::test_ops
