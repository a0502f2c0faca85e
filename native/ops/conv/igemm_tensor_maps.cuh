// The TMA tensor maps of the wgmma conv kernels: the conv1d weight's (a
// weight stage per box), the input half rows' (a window's share per box) and
// a raw input's (a chunk's staged window per box). Built on the host per
// launch (kokoro/tensor_map.h) and passed to the kernel as parameters.
// Included by the dispatch (igemm_launch.cuh) after igemm_wgmma.cuh.
#pragma once

namespace kokoro::ops::igemm {
namespace {

// The map of a conv1d's FP16 weight, [parts][Cout][K][ld] (parts 2 when
// split: hi, then lo), whose box (64 channels, one tap, kN rows, one part)
// is a weight stage; rows past Cout and channels past ld come in as zeros.
template <int kN>
CUtensorMap weight_map(const ConvArgs& a) {
    return tensor_map<4>("conv1d weight", a.w,
                         {cuuint64_t(a.ld), cuuint64_t(a.K), cuuint64_t(a.Cout),
                          cuuint64_t(a.w_lo != nullptr ? 2 : 1)},
                         {kBK, 1, kN, 1});
}

// The map of the input half rows, [parts][Tin][ld], whose box (64 channels,
// `rows` steps, one part) is a window's share; steps outside [0, Tin) and
// channels past ld come in as zeros.
CUtensorMap window_map(const ConvArgs& a, int rows) {
    return tensor_map<3>("conv input", a.x,
                         {cuuint64_t(a.ld), cuuint64_t(a.Tin),
                          cuuint64_t(a.x_lo != nullptr ? 2 : 1)},
                         {kBK, cuuint32_t(rows), 1});
}

// The map of a raw input (ops::HalfInput), [1][ld][Tin] at rows of
// half_channels_pitch(Tin), whose box (box_rows steps, 64 channels) is a
// chunk's staged window; steps outside [0, Tin) come in as zeros.
CUtensorMap raw_map(const ConvArgs& a, int box_rows) {
    return tensor_map<3>("conv raw input", a.x,
                         {cuuint64_t(a.Tin), cuuint64_t(a.ld), 1},
                         {cuuint32_t(box_rows), kBK, 1}, false,
                         cuuint64_t(half_channels_pitch(a.Tin)));
}

}  // namespace
}  // namespace kokoro::ops::igemm
