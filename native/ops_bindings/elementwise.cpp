// The ops' test bindings, elementwise (ops_bindings.cpp).
#include "common.h"

namespace kokoro::test_ops {

namespace {

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

}  // namespace

void register_elementwise(py::module_& o) {
    using namespace py::literals;
    o.def("albert_embeddings", &albert_embeddings, "ids"_a, "word"_a, "pos"_a = py::none(),
          "type0"_a = py::none(), "positions"_a = py::none());
    o.def("gelu_new", &gelu_new, "x"_a, "bias"_a = py::none());
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
}

}  // namespace kokoro::test_ops
