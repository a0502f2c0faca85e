"""The NumPy CPU backend: the Kokoro network built from kokoro_gpu.ops, structured like the official model."""

from .kmodel import KModelCPU

__all__ = ["KModelCPU"]
