"""kokoro_gpu: Kokoro-82M text-to-speech on native CUDA kernels, with a NumPy CPU backend."""

__version__ = "0.1.0"

from .api import KokoroTTS, SynthesisResult, WordTimestamp, synthesize
from .backends import backend_info
from .config import SAMPLE_RATE
from .errors import BackendError, CheckpointError, InputError, KokoroError, VoiceError

__all__ = [
    "SAMPLE_RATE",
    "BackendError",
    "CheckpointError",
    "InputError",
    "KokoroError",
    "KokoroTTS",
    "SynthesisResult",
    "VoiceError",
    "WordTimestamp",
    "__version__",
    "backend_info",
    "synthesize",
]
