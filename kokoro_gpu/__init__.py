"""kokoro_gpu: Kokoro-82M text-to-speech on native CUDA kernels, with a NumPy CPU backend."""

__version__ = "0.1.0"
