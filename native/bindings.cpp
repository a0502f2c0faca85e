// kokoro_gpu._native: the pybind11 module of the CUDA engine.
// - Engine(config, weights, device, precision): uploads the folded weights
//   (a dict of float32 arrays) to GPU `device`; forward(...) runs one
//   utterance with the GIL released and returns (audio, durations, trace or
//   None); forward_batch(...) runs a list of utterances concurrently and
//   returns a list of (audio, durations), forward_on_lane(...) the same on
//   one lane (one scheduler thread per lane), handing each result to a
//   callback as it lands; set_phase_timing / phase_times give the
//   benchmark's per-phase wall-clock breakdown.
// - cuda_status() / devices(): raw facts about the driver, runtime and GPUs;
//   kokoro_gpu.backends turns them into backend_info() and its messages.
// - C++ errors become kokoro_gpu.errors exceptions: CudaError -> BackendError,
//   WeightsError -> CheckpointError, InvalidInput -> InputError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cuda_runtime.h>

#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "kokoro/bindings.h"
#include "kokoro/check.h"
#include "kokoro/engine.h"

namespace py = pybind11;

namespace {

std::vector<int> int_list(const py::handle& value) { return value.cast<std::vector<int>>(); }

kokoro::ModelConfig config_from_dict(const py::dict& d) {
    kokoro::ModelConfig cfg;
    cfg.n_token = d["n_token"].cast<int>();
    cfg.hidden_dim = d["hidden_dim"].cast<int>();
    cfg.style_dim = d["style_dim"].cast<int>();
    cfg.n_layer = d["n_layer"].cast<int>();
    cfg.max_dur = d["max_dur"].cast<int>();
    cfg.text_encoder_kernel_size = d["text_encoder_kernel_size"].cast<int>();
    const py::dict bert = d["plbert"].cast<py::dict>();
    cfg.bert_hidden = bert["hidden_size"].cast<int>();
    cfg.bert_heads = bert["num_attention_heads"].cast<int>();
    cfg.bert_intermediate = bert["intermediate_size"].cast<int>();
    cfg.bert_layers = bert["num_hidden_layers"].cast<int>();
    cfg.bert_positions = bert["max_position_embeddings"].cast<int>();
    const py::dict ist = d["istftnet"].cast<py::dict>();
    cfg.upsample_initial_channel = ist["upsample_initial_channel"].cast<int>();
    cfg.upsample_rates = int_list(ist["upsample_rates"]);
    cfg.upsample_kernel_sizes = int_list(ist["upsample_kernel_sizes"]);
    cfg.resblock_kernel_sizes = int_list(ist["resblock_kernel_sizes"]);
    cfg.resblock_dilation_sizes =
        ist["resblock_dilation_sizes"].cast<std::vector<std::vector<int>>>();
    cfg.n_fft = ist["gen_istft_n_fft"].cast<int>();
    cfg.hop = ist["gen_istft_hop_size"].cast<int>();
    return cfg;
}

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

kokoro::Precision precision_from_name(const std::string& name) {
    if (name == "fp32") return kokoro::Precision::kFp32;
    if (name == "fast") return kokoro::Precision::kFast;
    throw kokoro::InvalidInput("unknown precision '" + name + "'; use fp32 or fast");
}

std::unique_ptr<kokoro::Engine> make_engine(const py::dict& config, const py::dict& weights,
                                            int device, const std::string& precision) {
    const kokoro::Precision mode = precision_from_name(precision);
    // Keep the float32 views alive while the engine copies them to the GPU.
    std::vector<FloatArray> arrays;
    arrays.reserve(weights.size());
    kokoro::HostWeights host;
    for (const auto& [key, value] : weights) {
        arrays.push_back(FloatArray::ensure(value));
        const FloatArray& a = arrays.back();
        if (!a) throw py::type_error("weight " + key.cast<std::string>() + " is not a float array");
        std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
        host[key.cast<std::string>()] = {a.data(), std::move(shape)};
    }
    const kokoro::ModelConfig cfg = config_from_dict(config);
    py::gil_scoped_release release;
    return std::make_unique<kokoro::Engine>(cfg, host, device, mode);
}

using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

kokoro::Utterance utterance(const IdArray& ids, const FloatArray& ref_s, float speed,
                            bool deterministic, uint64_t seed) {
    return {ids.data(), static_cast<int>(ids.size()), ref_s.data(), static_cast<int>(ref_s.size()),
            speed,      deterministic,                 seed};
}

// The audio's page-locked block moves into the NumPy array (a capsule owns
// it, and returns it to the engine's pool when the array goes: no copy of
// seconds of samples); the durations are copied.
py::tuple audio_and_durations(kokoro::ForwardResult& result) {
    using Block = kokoro::PinnedPool::Block;
    auto block = std::make_unique<Block>(std::move(result.audio));
    const py::capsule owner(block.get(), [](void* p) { delete static_cast<Block*>(p); });
    const float* samples = block.release()->get();  // the capsule's from here on
    py::array_t<float> audio(static_cast<py::ssize_t>(result.samples), samples, owner);
    py::array_t<int64_t> durations(static_cast<py::ssize_t>(result.durations.size()),
                                   result.durations.data());
    return py::make_tuple(audio, durations);
}

py::tuple engine_forward(kokoro::Engine& engine, const IdArray& ids, const FloatArray& ref_s,
                         float speed, bool deterministic, uint64_t seed, bool trace) {
    kokoro::Trace host_trace;
    kokoro::ForwardResult result;
    {
        py::gil_scoped_release release;
        result = engine.forward(utterance(ids, ref_s, speed, deterministic, seed),
                                trace ? &host_trace : nullptr);
    }
    const py::tuple pair = audio_and_durations(result);
    py::object audio = pair[0], durations = pair[1];
    if (!trace) return py::make_tuple(audio, durations, py::none());
    py::dict out;
    for (const auto& [key, array] : host_trace.floats) {
        py::array_t<float> values(array.shape);
        std::copy(array.values.begin(), array.values.end(), values.mutable_data());
        out[py::str(key)] = values;
    }
    for (const auto& [key, values] : host_trace.ints) {
        out[py::str(key)] =
            py::array_t<int64_t>(static_cast<py::ssize_t>(values.size()), values.data());
    }
    return py::make_tuple(audio, durations, out);
}

// A batch's items, a list of (ids, ref_s, speed, seed), as utterances (one
// `deterministic` for all); the converted arrays outlive the engine call.
struct BatchItems {
    std::vector<IdArray> ids;
    std::vector<FloatArray> styles;
    std::vector<kokoro::Utterance> utterances;

    BatchItems(const py::list& items, bool deterministic) {
        ids.reserve(items.size());
        styles.reserve(items.size());
        for (const py::handle& item : items) {
            const py::tuple t = item.cast<py::tuple>();
            if (t.size() != 4) throw py::value_error("batch items are (ids, ref_s, speed, seed)");
            ids.push_back(IdArray::ensure(t[0]));
            styles.push_back(FloatArray::ensure(t[1]));
            if (!ids.back() || !styles.back()) throw py::type_error("ids and ref_s must be arrays");
            utterances.push_back(utterance(ids.back(), styles.back(), t[2].cast<float>(),
                                           deterministic, t[3].cast<uint64_t>()));
        }
    }
};

py::list audio_list(std::vector<kokoro::ForwardResult>& results) {
    py::list out;
    for (kokoro::ForwardResult& r : results) out.append(audio_and_durations(r));
    return out;
}

py::list engine_forward_batch(kokoro::Engine& engine, const py::list& items, bool deterministic) {
    const BatchItems batch(items, deterministic);
    std::vector<kokoro::ForwardResult> results;
    {
        py::gil_scoped_release release;
        results = engine.forward_batch(batch.utterances);
    }
    return audio_list(results);
}

// The results in the items' order; each also goes to on_result(index,
// audio, durations) as soon as it lands (the lane goes on meanwhile). The
// callback's first error is raised once the call is done.
py::list engine_forward_on_lane(kokoro::Engine& engine, int lane, const py::list& items,
                                bool deterministic, const py::object& on_result) {
    const BatchItems batch(items, deterministic);
    std::vector<py::object> pairs(batch.utterances.size());
    std::exception_ptr callback_error;
    {
        py::gil_scoped_release release;
        engine.forward_on_lane(lane, batch.utterances,
                               [&](size_t i, kokoro::ForwardResult result) {
                                   const py::gil_scoped_acquire acquire;
                                   const py::tuple pair = audio_and_durations(result);
                                   pairs[i] = pair;
                                   if (on_result.is_none() || callback_error) return;
                                   try {
                                       on_result(i, pair[0], pair[1]);
                                   } catch (const py::error_already_set&) {
                                       callback_error = std::current_exception();
                                   }
                               });
    }
    if (callback_error) std::rethrow_exception(callback_error);
    py::list out;
    for (const py::object& pair : pairs) out.append(pair);
    return out;
}

// Driver and runtime versions and the device count, with the error of the
// count query (if any) by name and message; nothing here throws.
py::dict cuda_status() {
    py::dict status;
    int driver = 0;
    int runtime = 0;
    status["driver_version"] = cudaDriverGetVersion(&driver) == cudaSuccess ? driver : 0;
    status["runtime_version"] = cudaRuntimeGetVersion(&runtime) == cudaSuccess ? runtime : 0;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    status["device_count"] = err == cudaSuccess ? count : 0;
    status["error"] =
        err == cudaSuccess ? py::object(py::none()) : py::object(py::str(cudaGetErrorName(err)));
    status["message"] =
        err == cudaSuccess ? py::object(py::none()) : py::object(py::str(cudaGetErrorString(err)));
    static_cast<void>(cudaGetLastError());  // the failed query is reported above; clear it
    return status;
}

py::list devices() {
    py::list out;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        static_cast<void>(cudaGetLastError());  // cuda_status() reports why; no devices to list
        return out;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        KOKORO_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
        py::dict dev;
        dev["index"] = i;
        dev["name"] = std::string(prop.name);
        dev["compute_capability"] = py::make_tuple(prop.major, prop.minor);
        dev["total_memory_bytes"] = static_cast<uint64_t>(prop.totalGlobalMem);
        dev["multiprocessors"] = prop.multiProcessorCount;
        out.append(dev);
    }
    return out;
}

void raise_kokoro_error(const char* type_name, const char* message) {
    py::object type = py::module_::import("kokoro_gpu.errors").attr(type_name);
    PyErr_SetString(type.ptr(), message);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "Kokoro-82M CUDA engine (see kokoro_gpu.backends)";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const kokoro::CudaError& e) {
            raise_kokoro_error("BackendError", e.what());
        } catch (const kokoro::WeightsError& e) {
            raise_kokoro_error("CheckpointError", e.what());
        } catch (const kokoro::InvalidInput& e) {
            raise_kokoro_error("InputError", e.what());
        }
    });

    m.attr("cuda_architectures") = KOKORO_CUDA_ARCHITECTURES;
    m.def("cuda_status", &cuda_status,
          "Driver/runtime versions, device count and the count query's error.");
    m.def("devices", &devices, "Name, compute capability and memory of every visible GPU.");

    py::class_<kokoro::Engine>(m, "Engine")
        .def(py::init(&make_engine), py::arg("config"), py::arg("weights"), py::arg("device") = 0,
             py::arg("precision") = "fp32",
             "Upload folded float32 weights to GPU `device` for the model of `config` (config.json "
             "fields); precision 'fp32' or 'fast' (TF32 GEMMs past the durations).")
        .def("forward", &engine_forward, py::arg("input_ids"), py::arg("ref_s"), py::arg("speed"),
             py::arg("deterministic"), py::arg("seed"), py::arg("trace") = false,
             "ids int64 [T], ref_s float32 [256] -> (audio float32, durations int64, trace dict or "
             "None).")
        .def("forward_batch", &engine_forward_batch, py::arg("items"), py::arg("deterministic"),
             "[(ids int64 [T], ref_s float32 [256], speed, seed)] -> [(audio, durations)], run "
             "concurrently on several lanes; each equals forward() of the same item.")
        .def("forward_on_lane", &engine_forward_on_lane, py::arg("lane"), py::arg("items"),
             py::arg("deterministic"), py::arg("on_result") = py::none(),
             "forward_batch's items on lane `lane` (0 .. batch_lanes - 1) alone; calls on "
             "different lanes run concurrently (a scheduler's thread per lane). on_result(index, "
             "audio, durations), if given, gets each result as soon as it lands.")
        // These wait for lane 0, whose thread may be waiting for the GIL (forward_on_lane's
        // on_result): without it.
        .def("set_phase_timing", &kokoro::Engine::set_phase_timing, py::arg("on"),
             py::call_guard<py::gil_scoped_release>(),
             "While on, forward() records timing events at the model's phase boundaries.")
        .def("phase_times", &kokoro::Engine::phase_times, py::call_guard<py::gil_scoped_release>(),
             "[(mark, ms since the start of the last forward())] in time order (phase timing on).")
        .def_property_readonly("batch_lanes", &kokoro::Engine::batch_lanes,
                               "Lanes a forward_batch runs on: one per 8 GiB of the GPU's memory, "
                               "4 to 8.")
        .def_property_readonly("device", &kokoro::Engine::device)
        .def_property_readonly("weight_bytes", &kokoro::Engine::weight_bytes)
        .def_property_readonly("workspace_bytes", &kokoro::Engine::workspace_bytes)
        .def_property_readonly(
            "phase_runs",
            [](const kokoro::Engine& e) {
                const kokoro::PhaseRuns r = e.phase_runs();
                py::dict runs;
                runs["eager"] = r.eager;
                runs["captured"] = r.captured;
                runs["replayed"] = r.replayed;
                return runs;
            },
            "How the phases of the forward passes so far ran: {'eager', 'captured', "
            "'replayed'} counts (all lanes).");

#ifdef KOKORO_OPS_BINDINGS
    kokoro::register_ops(m);  // the op tests' bindings (a build option)
#endif
}
