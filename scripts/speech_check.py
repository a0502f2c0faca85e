"""Speech round trip on real weights: synthesize a fixed sentence set, then transcribe it with Whisper.

    python scripts/speech_check.py synth --out DIR [--model kokoro-onnx-int8] [--device cpu|cuda]
                                         [--precision fp32|fast] [--seed 0] [--format wav|npz]
    python scripts/speech_check.py transcribe DIR [DIR ...] [--max-wer 0.10] [--report OUT]
    python scripts/speech_check.py ja-phonemes

``synth`` reads tests/data/speech_sentences.json (English text, Japanese
phonemes; every sentence with every voice there) and writes one 24 kHz WAV per
utterance (``--format npz``: all of them in one ``audio.npz``, for a machine
that hands back few files) and ``synthesis.json`` (model, device, precision,
each utterance's text, phonemes, frame durations and length). It needs only kokoro_gpu, so it
runs on a GPU machine without a recogniser. ``transcribe`` reads such a folder
back, transcribes every WAV with Whisper base (tests/asr.py: faster-whisper,
CPU int8, offline) and prints the per-utterance table with English word error
rate and Japanese character error rate; it writes ``transcripts.json`` and
``transcripts.md`` beside the audio (``--report OUT``: in OUT/<folder name>)
and exits 1 when English WER is above ``--max-wer``; given several folders
(fp32 and fast), it also lists the English utterances whose normalised
transcripts differ between them.
``ja-phonemes`` refreshes the Japanese phonemes of the sentence file with
misaki's Japanese G2P (needs misaki[ja]).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ROOT / "tests" / "data" / "speech_sentences.json"
SYNTHESIS_JSON = "synthesis.json"
AUDIO_NPZ = "audio.npz"
ENGLISH_MAX_WER = 0.10
DEFAULT_MODEL = "kokoro-onnx-int8"
DEFAULT_SEED = 0


@dataclass(frozen=True)
class Utterance:
    """One sentence read with one voice."""

    id: str
    language: str  # "en" or "ja"
    voice: str
    text: str
    phonemes: str  # given for Japanese; English is read from the text


def load_sentences(path: Path = SENTENCES) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def utterances(path: Path = SENTENCES) -> list[Utterance]:
    """Every sentence of the set with every voice, English first."""
    data = load_sentences(path)
    out = []
    for voice in data["voices"]:
        for i, text in enumerate(data["english"]):
            out.append(Utterance(f"en{i + 1}_{voice}", "en", voice, text, ""))
        for i, item in enumerate(data["japanese"]):
            if not item["phonemes"]:
                raise ValueError(f"{path}: Japanese sentence {i + 1} has no phonemes; "
                                 "run: python scripts/speech_check.py ja-phonemes")
            out.append(Utterance(f"ja{i + 1}_{voice}", "ja", voice, item["text"], item["phonemes"]))
    return out


@dataclass
class Synthesized:
    """What ``synth`` records per utterance."""

    utterance: Utterance
    audio: np.ndarray
    phonemes: str
    durations: list[int]
    seconds: float
    synth_seconds: float


def synthesize_set(tts: Any, items: list[Utterance], seed: int = DEFAULT_SEED) -> list[Synthesized]:
    """Each utterance on ``tts`` (a KokoroTTS); English through the English front end."""
    out = []
    for u in items:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            # Japanese voices reading English warn about the accent: expected here.
            warnings.filterwarnings("ignore", message=".*will speak with an accent.*")
            if u.language == "en":
                r = tts.synthesize(u.text, voice=u.voice, lang="a", seed=seed)
            else:
                r = tts.synthesize(phonemes=u.phonemes, voice=u.voice, seed=seed)
        elapsed = time.perf_counter() - t0
        out.append(Synthesized(u, np.asarray(r.audio, dtype=np.float32), r.phonemes,
                               [int(d) for d in r.durations], r.seconds, elapsed))
    return out


def write_synthesis(results: list[Synthesized], out: Path, meta: dict[str, Any], fmt: str = "wav") -> Path:
    """WAVs (or one audio.npz) and synthesis.json into ``out`` (created; the set's files are replaced)."""
    import soundfile as sf

    out.mkdir(parents=True, exist_ok=True)
    if fmt == "npz":
        np.savez_compressed(out / AUDIO_NPZ, **{r.utterance.id: r.audio for r in results})
    records = []
    for r in results:
        if fmt == "wav":
            sf.write(out / f"{r.utterance.id}.wav", r.audio, 24_000, subtype="FLOAT")
        records.append({**asdict(r.utterance), "phonemes": r.phonemes, "durations": r.durations,
                        "frames": sum(r.durations), "seconds": round(r.seconds, 4),
                        "synth_seconds": round(r.synth_seconds, 3)})
    path = out / SYNTHESIS_JSON
    path.write_text(json.dumps({**meta, "utterances": records}, indent=1, ensure_ascii=True) + "\n")
    return path


@dataclass(frozen=True)
class Transcribed:
    id: str
    language: str
    voice: str
    reference: str
    transcript: str
    errors: int
    length: int

    @property
    def rate(self) -> float:
        return self.errors / max(self.length, 1)


def transcribe_items(items: list[tuple[Utterance, np.ndarray]]) -> list[Transcribed]:
    """Whisper base's transcript and error count of each (utterance, 24 kHz audio)."""
    import asr

    out = []
    for u, audio in items:
        text = asr.transcribe(audio, 24_000, u.language)
        s = asr.score(u.text, text, u.language)
        out.append(Transcribed(u.id, u.language, u.voice, u.text, text, s.errors, s.length))
    return out


def pooled(rows: list[Transcribed], language: str) -> float:
    chosen = [r for r in rows if r.language == language]
    return sum(r.errors for r in chosen) / max(sum(r.length for r in chosen), 1)


def report_markdown(rows: list[Transcribed], title: str) -> str:
    lines = [f"### {title}", "",
             f"English WER {pooled(rows, 'en'):.1%} (words), Japanese CER {pooled(rows, 'ja'):.1%} "
             "(characters), Whisper base (faster-whisper, CPU int8).", "",
             "| id | voice | reference | transcript | errors |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.id} | {r.voice} | {r.reference} | {r.transcript} | {r.errors}/{r.length} |")
    return "\n".join(lines) + "\n"


def write_report(rows: list[Transcribed], out: Path, title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = {"title": title, "english_wer": pooled(rows, "en"), "japanese_cer": pooled(rows, "ja"),
            "utterances": [{**asdict(r), "rate": r.rate} for r in rows]}
    (out / "transcripts.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    (out / "transcripts.md").write_text(report_markdown(rows, title), encoding="utf-8")


def _synth(args: argparse.Namespace) -> int:
    from kokoro_gpu.api import KokoroTTS

    tts = KokoroTTS.from_pretrained(args.model, device=args.device, precision=args.precision)
    items = utterances()
    results = synthesize_set(tts, items, args.seed)
    meta = {"model": str(args.model), "device": tts.device, "precision": tts.precision, "seed": args.seed}
    path = write_synthesis(results, args.out, meta, args.format)
    total = sum(r.seconds for r in results)
    took = sum(r.synth_seconds for r in results)
    print(f"{len(results)} utterances, {total:.1f} s of audio in {took:.1f} s on {tts.device} "
          f"({tts.precision}); {path}")
    return 0


def load_synthesis(folder: Path) -> tuple[dict[str, Any], list[tuple[Utterance, np.ndarray]]]:
    import soundfile as sf

    meta = json.loads((folder / SYNTHESIS_JSON).read_text())
    packed = dict(np.load(folder / AUDIO_NPZ)) if (folder / AUDIO_NPZ).is_file() else None
    items = []
    for rec in meta["utterances"]:
        if packed is not None:
            audio = packed[rec["id"]]
        else:
            audio, rate = sf.read(folder / f"{rec['id']}.wav", dtype="float32")
            if rate != 24_000:
                raise ValueError(f"{rec['id']}.wav is {rate} Hz, expected 24000")
        u = Utterance(rec["id"], rec["language"], rec["voice"], rec["text"], rec["phonemes"])
        items.append((u, audio))
    return meta, items


def _transcribe(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    import asr

    status = 0
    english: dict[str, dict[str, str]] = {}  # folder -> id -> normalised transcript
    for folder in args.folders:
        meta, items = load_synthesis(folder)
        rows = transcribe_items(items)
        title = f"{meta['model']} on {meta['device']} ({meta['precision']}), seed {meta['seed']}"
        write_report(rows, args.report / folder.name if args.report else folder, title)
        print(report_markdown(rows, title))
        english[str(folder)] = {r.id: asr.normalize_english(r.transcript) for r in rows if r.language == "en"}
        wer = pooled(rows, "en")
        if wer > args.max_wer:
            print(f"{folder}: English WER {wer:.1%} is above {args.max_wer:.0%}", file=sys.stderr)
            status = 1
    if len(english) > 1:
        first, *others = english
        differ = [f"{i}: {name} {english[name].get(i)!r} vs {first} {text!r}"
                  for name in others for i, text in english[first].items() if english[name].get(i) != text]
        print("English transcripts " + ("differ:\n" + "\n".join(differ) if differ else
                                        f"identical across {len(english)} folders"))
    return status


def _ja_phonemes(_args: argparse.Namespace) -> int:
    from misaki import ja

    g2p = ja.JAG2P()
    data = load_sentences()
    for item in data["japanese"]:
        item["phonemes"] = g2p(item["text"])[0]
        print(f"{item['text']} -> {item['phonemes']}")
    SENTENCES.write_text(json.dumps(data, indent=2, ensure_ascii=True) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("synth", help="synthesize the sentence set into WAVs and synthesis.json")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--model", default=DEFAULT_MODEL, help=f"model name or path (default {DEFAULT_MODEL})")
    s.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    s.add_argument("--precision", default="fp32", choices=("fp32", "fast"))
    s.add_argument("--seed", type=int, default=DEFAULT_SEED, help="generator noise seed")
    s.add_argument("--format", default="wav", choices=("wav", "npz"),
                   help="one WAV per utterance, or all in one audio.npz")
    s.set_defaults(run=_synth)
    t = sub.add_parser("transcribe", help="transcribe a synth folder; print the WER table")
    t.add_argument("folders", type=Path, nargs="+", metavar="DIR")
    t.add_argument("--max-wer", type=float, default=ENGLISH_MAX_WER)
    t.add_argument("--report", type=Path, help="write the transcripts under this folder instead")
    t.set_defaults(run=_transcribe)
    j = sub.add_parser("ja-phonemes", help="refresh the Japanese phonemes with misaki[ja]")
    j.set_defaults(run=_ja_phonemes)
    args = ap.parse_args(argv)
    sys.path.append(str(ROOT))  # an installed kokoro_gpu (with its native engine) wins
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
