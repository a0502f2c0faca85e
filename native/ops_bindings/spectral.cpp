// The ops' test bindings, spectral (ops_bindings.cpp).
#include "common.h"

namespace kokoro::test_ops {

namespace {

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

void register_spectral(py::module_& o) {
    using namespace py::literals;
    o.def("stft_mag_phase", &stft_mag_phase, "x"_a, "n_fft"_a = 20, "hop"_a = 5);
    o.def("istft_from_logits", &istft_from_logits, "logits"_a, "n_fft"_a = 20, "hop"_a = 5);
    o.def("harmonic_source", &harmonic_source, "f0"_a, "upp"_a, "lin_w"_a, "lin_b"_a,
          "seed"_a = py::none(), "sample_rate"_a = 24000, "n_harm"_a = 9, "sine_amp"_a = 0.1f,
          "noise_std"_a = 0.003f, "voiced_threshold"_a = 10.f);
}

}  // namespace kokoro::test_ops
