// The ops' test bindings, linear (ops_bindings.cpp).
#include "common.h"

namespace kokoro::test_ops {

namespace {

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

}  // namespace

void register_linear(py::module_& o) {
    using namespace py::literals;
    o.def("matmul", &matmul, "a"_a, "b"_a, "trans_a"_a = false, "trans_b"_a = false);
    o.def("linear", &linear, "x"_a, "w"_a, "b"_a = py::none(), "y0"_a = py::none(), "beta"_a = 0.f,
          "split"_a = false, "mma_sync"_a = false, "stacked"_a = py::none());
    o.def("albert_ffn", &albert_ffn, "x"_a, "w1"_a, "b1"_a, "w2"_a);
}

}  // namespace kokoro::test_ops
