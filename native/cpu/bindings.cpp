// kokoro_gpu._cpu: the CPU backend's fused kernels (native/cpu), NumPy in and
// out. Each has a NumPy reference in kokoro_gpu.ops that the tests hold it to;
// the calls release the GIL, so the backend's worker threads run them side by
// side.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "adain.h"
#include "conv_transform.h"
#include "lstm.h"

namespace py = pybind11;

namespace {

using FloatArray = py::array_t<float, py::array::forcecast>;

// A 2-D float32 array with unit inner stride: its row stride in floats.
int64_t row_stride(const py::buffer_info& info, const char* name) {
    if (info.ndim != 2 || info.format != py::format_descriptor<float>::format() ||
        (info.shape[1] > 1 && info.strides[1] != sizeof(float)) ||
        info.strides[0] % int64_t(sizeof(float)) != 0) {
        throw std::invalid_argument(std::string(name) +
                                    " must be a 2-D float32 array with contiguous rows");
    }
    return info.strides[0] / int64_t(sizeof(float));
}

const float* vector_of(const FloatArray& v, int64_t rows, const char* name) {
    if (v.ndim() != 1 || v.shape(0) != rows)
        throw std::invalid_argument(std::string(name) + " must hold one value per row");
    return v.data();
}

kokoro::cpu::Activation activation_of(const std::string& act) {
    if (act == "none") return kokoro::cpu::Activation::kNone;
    if (act == "leaky_relu") return kokoro::cpu::Activation::kLeakyRelu;
    if (act == "snake") return kokoro::cpu::Activation::kSnake;
    throw std::invalid_argument("unknown activation '" + act + "'");
}

void adain_rows(py::buffer x, py::buffer out, const FloatArray& gamma, const FloatArray& beta,
                const std::string& act, float slope, const std::optional<FloatArray>& alpha,
                float eps) {
    const py::buffer_info xi = x.request(), oi = out.request(true);
    kokoro::cpu::AdainRows spec;
    spec.x_stride = row_stride(xi, "x");
    spec.out_stride = row_stride(oi, "out");
    if (xi.shape != oi.shape) throw std::invalid_argument("x and out must have the same shape");
    spec.x = static_cast<const float*>(xi.ptr);
    spec.out = static_cast<float*>(oi.ptr);
    spec.rows = xi.shape[0];
    spec.length = xi.shape[1];
    spec.gamma = vector_of(gamma, spec.rows, "gamma");
    spec.beta = vector_of(beta, spec.rows, "beta");
    spec.act = activation_of(act);
    if (spec.act == kokoro::cpu::Activation::kSnake) {
        if (!alpha) throw std::invalid_argument("the snake activation needs alpha");
        spec.alpha = vector_of(*alpha, spec.rows, "alpha");
    }
    spec.slope = slope;
    spec.eps = eps;
    if (spec.length == 0) return;
    py::gil_scoped_release release;
    kokoro::cpu::adain_rows(spec);
}

// Throws unless info is a C-contiguous 2-D float32 array of `cols` columns.
void require_contiguous_rows(const py::buffer_info& info, int64_t cols, const char* name) {
    if (row_stride(info, name) != cols || info.shape[1] != cols)
        throw std::invalid_argument(std::string(name) + " must be C-contiguous with " +
                                    std::to_string(cols) + " columns");
}

// Throws unless `a` is a C-contiguous 3-D float32 array (and writeable, if asked).
void require_contiguous_3d(const py::array& a, const char* name, bool writeable) {
    if (!py::isinstance<py::array_t<float>>(a) || a.ndim() != 3 || !(a.flags() & py::array::c_style) ||
        (writeable && !a.writeable()))
        throw std::invalid_argument(std::string(name) + " must be a " + (writeable ? "writeable " : "") +
                                    "C-contiguous 3-D float32 array");
}

void lstm_recurrence(py::buffer gates_in, py::buffer w_hh_t, py::buffer out, bool reverse) {
    const py::buffer_info gi = gates_in.request(), wi = w_hh_t.request(), oi = out.request(true);
    if (wi.ndim != 2 || wi.shape[1] != 4 * wi.shape[0])
        throw std::invalid_argument("w_hh_t must be [H, 4H]");
    kokoro::cpu::LstmRecurrence spec;
    spec.hidden = wi.shape[0];
    require_contiguous_rows(wi, 4 * spec.hidden, "w_hh_t");
    require_contiguous_rows(gi, 4 * spec.hidden, "gates_in");
    spec.out_stride = row_stride(oi, "out");
    if (oi.shape[0] != gi.shape[0] || oi.shape[1] != spec.hidden)
        throw std::invalid_argument("out must be [steps, H]");
    spec.gates_in = static_cast<const float*>(gi.ptr);
    spec.w_hh_t = static_cast<const float*>(wi.ptr);
    spec.out = static_cast<float*>(oi.ptr);
    spec.steps = gi.shape[0];
    spec.reverse = reverse;
    py::gil_scoped_release release;
    kokoro::cpu::lstm_recurrence(spec);
}

void conv_inverse_tiles(const py::array& products, py::buffer inverse_t,
                        const std::optional<FloatArray>& bias, py::buffer y, int64_t pairs, int64_t dilation) {
    require_contiguous_3d(products, "products", false);
    const py::buffer_info pi = products.request(), ai = inverse_t.request(), yi = y.request(true);
    kokoro::cpu::InverseTiles spec;
    spec.points = pi.shape[0];
    spec.channels = pi.shape[1];
    spec.pairs = pairs;
    spec.phases = dilation;
    if (pairs < 0 || 3 * pairs > spec.points)
        throw std::invalid_argument("pairs must be between 0 and a third of the points");
    if (dilation < 1 || pi.shape[2] % dilation != 0)
        throw std::invalid_argument("the products' columns must be a multiple of the dilation");
    spec.tiles = pi.shape[2] / dilation;
    if (ai.ndim != 2 || ai.shape[0] != spec.points - pairs || ai.shape[1] < 1 ||
        ai.shape[1] > kokoro::cpu::kMaxTileOutputs)
        throw std::invalid_argument("inverse_t must be [points - pairs, m] with 1 <= m <= " +
                                    std::to_string(kokoro::cpu::kMaxTileOutputs));
    spec.m = ai.shape[1];
    require_contiguous_rows(ai, spec.m, "inverse_t");
    spec.y_stride = row_stride(yi, "y");
    if (yi.shape[0] != spec.channels || yi.shape[1] != spec.tiles * spec.m * dilation)
        throw std::invalid_argument("y must be [channels, tiles m dilation]");
    spec.products = static_cast<const float*>(pi.ptr);
    spec.inverse_t = static_cast<const float*>(ai.ptr);
    spec.y = static_cast<float*>(yi.ptr);
    if (bias) spec.bias = vector_of(*bias, spec.channels, "bias");
    py::gil_scoped_release release;
    kokoro::cpu::inverse_tiles(spec);
}

void conv_forward_tiles(py::buffer x, py::buffer forward_t, py::array& points, int64_t pairs, int64_t m,
                        int64_t dilation) {
    const py::buffer_info xi = x.request(), bi = forward_t.request();
    require_contiguous_3d(points, "points", true);
    const py::buffer_info pi = points.request(true);
    kokoro::cpu::ForwardTiles spec;
    spec.n = bi.ndim == 2 ? bi.shape[1] : 0;
    if (bi.ndim != 2 || bi.shape[0] != spec.n || (spec.n != 8 && spec.n != 16 && spec.n != 32))
        throw std::invalid_argument("forward_t must be [n, n] with n 8, 16 or 32");
    require_contiguous_rows(bi, spec.n, "forward_t");
    if (pairs < 0 || pi.shape[0] != spec.n + pairs || 2 * pairs > spec.n)
        throw std::invalid_argument("points must have n + pairs rows, pairs at most n / 2");
    if (m < 1 || m > spec.n) throw std::invalid_argument("m must be between 1 and n");
    if (dilation < 1 || pi.shape[2] % dilation != 0)
        throw std::invalid_argument("the points' columns must be a multiple of the dilation");
    spec.x_stride = row_stride(xi, "x");
    spec.channels = pi.shape[1];
    spec.tiles = pi.shape[2] / dilation;
    if (xi.shape[0] != spec.channels ||
        (spec.tiles > 0 && xi.shape[1] < dilation * ((spec.tiles - 1) * m + spec.n)))
        throw std::invalid_argument("x must be [channels, >= dilation ((tiles - 1) m + n)]");
    spec.x = static_cast<const float*>(xi.ptr);
    spec.forward_t = static_cast<const float*>(bi.ptr);
    spec.points = static_cast<float*>(pi.ptr);
    spec.pairs = pairs;
    spec.phases = dilation;
    spec.m = m;
    if (spec.tiles == 0) return;
    py::gil_scoped_release release;
    kokoro::cpu::forward_tiles(spec);
}

}  // namespace

PYBIND11_MODULE(_cpu, m) {
    m.doc() = "The CPU backend's fused kernels (each equal to its NumPy reference in kokoro_gpu.ops).";
    m.def("adain_rows", &adain_rows, py::arg("x"), py::arg("out"), py::arg("gamma"), py::arg("beta"),
          py::arg("act"), py::arg("slope") = 0.2f, py::arg("alpha") = py::none(),
          py::arg("eps") = 1e-5f,
          "AdaIN1d and its activation ('none', 'leaky_relu', 'snake') on the rows of x [C, T] "
          "into out [C, T] (either may be a view with strided rows): kokoro_gpu.ops.norm.adain.");
    m.def("lstm_recurrence", &lstm_recurrence, py::arg("gates_in"), py::arg("w_hh_t"), py::arg("out"),
          py::arg("reverse") = false,
          "One LSTM direction's recurrence: gates_in [T, 4H] (x W_ih^T + b per time step), "
          "w_hh_t [H, 4H] -> h per time step into out [T, H] (a view with strided rows allowed), "
          "from the last step back with reverse; kokoro_gpu.ops.lstm.lstm_bidirectional.");
    m.def("conv_inverse_tiles", &conv_inverse_tiles, py::arg("products"), py::arg("inverse_t"),
          py::arg("bias"), py::arg("y"), py::arg("pairs"), py::arg("dilation"),
          "A fast conv's step after its per-point GEMMs: products [P, Cout, dilation tiles] folded "
          "(pairs Gauss blocks), times inverse_t [P - pairs, m], plus bias (or None), into y "
          "[Cout, tiles m dilation] (a view with strided rows allowed) in time order; "
          "kokoro_gpu.ops.fast_conv.inverse_tiles.");
    m.def("conv_forward_tiles", &conv_forward_tiles, py::arg("x"), py::arg("forward_t"), py::arg("points"),
          py::arg("pairs"), py::arg("m"), py::arg("dilation"),
          "A fast conv's step before its per-point GEMMs: the tiles (m apart, n = forward_t's size) of x "
          "[Cin, ...] (the padded input from the chunk's first sample; a view with strided rows allowed) "
          "through forward_t [n, n], plus pairs Gauss sums, into points [n + pairs, Cin, dilation tiles]; "
          "kokoro_gpu.ops.fast_conv.forward_tiles.");
    m.attr("conv_max_tile_outputs") = kokoro::cpu::kMaxTileOutputs;
}
