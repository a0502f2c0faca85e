// Python bindings shared between translation units of kokoro_gpu._native:
// bindings.cpp defines the module (Engine, device queries) and calls
// register_ops, which native/ops_bindings.cpp implements to expose the single
// ops to the op-level tests (built with the CMake option KOKORO_OPS_BINDINGS).
#pragma once

#include <pybind11/pybind11.h>

namespace kokoro {

void register_ops(pybind11::module_& m);

}  // namespace kokoro
