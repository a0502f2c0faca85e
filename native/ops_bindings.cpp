// Test bindings of the op layer: kokoro_gpu._native.ops, one function per op
// of native/include/kokoro/ops.h, taking and returning NumPy float32 / int32
// arrays. Each call uploads its inputs, fills every output buffer with NaN
// bytes (0xFF; -1 for int32) so an unwritten element shows, runs the op on a
// private stream, synchronises and downloads. For the unit tests against the
// NumPy reference ops; the engine itself never goes through here.
// One file per op family under native/ops_bindings/; this one makes the
// submodule and registers them.
#include <pybind11/pybind11.h>

#include "kokoro/bindings.h"

namespace py = pybind11;

namespace kokoro {

namespace test_ops {
void register_linear(py::module_& o);
void register_elementwise(py::module_& o);
void register_norm(py::module_& o);
void register_conv(py::module_& o);
void register_lstm_attention(py::module_& o);
void register_spectral(py::module_& o);
}  // namespace test_ops

void register_ops(py::module_& m) {
    py::module_ o = m.def_submodule(
        "ops", "Test bindings of the CUDA ops: NumPy in, NumPy out (outputs poisoned with NaN first).");
    test_ops::register_linear(o);
    test_ops::register_elementwise(o);
    test_ops::register_norm(o);
    test_ops::register_conv(o);
    test_ops::register_lstm_attention(o);
    test_ops::register_spectral(o);
}

}  // namespace kokoro
