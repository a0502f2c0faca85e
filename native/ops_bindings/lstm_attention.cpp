// The ops' test bindings, lstm, attention (ops_bindings.cpp).
#include "common.h"

namespace kokoro::test_ops {

namespace {

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

}  // namespace

void register_lstm_attention(py::module_& o) {
    using namespace py::literals;
    o.def("lstm_bidirectional", &lstm_bidirectional, "x"_a, "w_ih"_a, "w_hh"_a, "b"_a,
          "max_cluster_blocks"_a = 16);
    o.def("lstm_recurrence", &lstm_recurrence, "gx"_a, "w_hh"_a, "lengths"_a,
          "max_cluster_blocks"_a = 16, "shared_gpu"_a = false);
    o.def("attention", &attention, "q"_a, "k"_a, "v"_a, "heads"_a, "valid_len"_a,
          "packed"_a = false, "split"_a = false, "bias"_a = py::none(), "mma_sync"_a = false);
}

}  // namespace kokoro::test_ops
