"""Voice packs: names, files, archives, mixes, the hub (faked), style rows, language codes."""

from __future__ import annotations

import shutil
from pathlib import Path

import huggingface_hub
import numpy as np
import pytest
from safetensors.numpy import save_file

from kokoro_gpu.errors import InputError, VoiceError
from kokoro_gpu.voices import VoiceStore, official_voices, style_for, voice_lang_code

TINY = Path(__file__).parent / "data" / "tiny"
OFFICIAL_TSV = Path(__file__).resolve().parents[1] / "voices" / "voices.tsv"


def ramp() -> np.ndarray:
    """The contents of tests/data/tiny/voice.pt (see scripts/make_pth_fixture.py)."""
    return ((np.arange(510 * 256) % 1009) / 1009.0 - 0.5).astype(np.float32).reshape(510, 1, 256)


def pack(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((510, 1, 256)).astype(np.float32)


@pytest.fixture
def voices_dir(tmp_path: Path) -> Path:
    d = tmp_path / "voices"
    d.mkdir()
    shutil.copy(TINY / "voice.pt", d / "af_ramp.pt")
    np.save(d / "bm_npy.npy", pack(1).reshape(510, 256))  # [510, 256] is accepted too
    save_file({"voice": pack(2)}, d / "ef_st.safetensors")
    with open(d / "voices-v1.0.bin", "wb") as f:
        np.savez(f, zf_bin=pack(3), jf_bin=pack(4))
    (d / "notes.txt").write_text("not a voice")
    return d


def test_available_lists_every_source(voices_dir: Path) -> None:
    assert VoiceStore(voices_dir, None).available() == ["af_ramp", "bm_npy", "ef_st", "jf_bin", "zf_bin"]


def test_available_with_repo_adds_official_list(voices_dir: Path) -> None:
    names = VoiceStore(voices_dir, "hexgrad/Kokoro-82M").available()
    assert {"af_heart", "zm_yunyang", "af_ramp", "zf_bin"} <= set(names)
    assert len(names) == 54 + 5
    assert VoiceStore(None, None).available() == []


def test_official_list_matches_tsv() -> None:
    rows = [line.split("\t") for line in OFFICIAL_TSV.read_text().splitlines() if not line.startswith("#")]
    assert official_voices() == tuple(r[0] for r in rows)
    assert len(official_voices()) == 54
    for name, code, *_ in rows:
        assert voice_lang_code(name) == code, name


@pytest.mark.parametrize(("name", "want"), [
    ("af_ramp", ramp), ("bm_npy", lambda: pack(1)), ("ef_st", lambda: pack(2)),
    ("zf_bin", lambda: pack(3)), ("jf_bin", lambda: pack(4)),
])
def test_load_by_name(voices_dir: Path, name: str, want) -> None:
    got = VoiceStore(voices_dir, None).load(name)
    assert got.shape == (510, 1, 256) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want())


def test_named_packs_are_cached_read_only(voices_dir: Path) -> None:
    store = VoiceStore(voices_dir, None)
    a = store.load("af_ramp")
    assert store.load(" af_ramp ") is a
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0, 0] = 1.0


def test_load_by_path(voices_dir: Path) -> None:
    store = VoiceStore(None, None)
    np.testing.assert_array_equal(store.load(str(voices_dir / "af_ramp.pt")), ramp())
    np.testing.assert_array_equal(store.load(voices_dir / "ef_st.safetensors"), pack(2))
    np.testing.assert_array_equal(store.load(str(voices_dir / "bm_npy.npy")), pack(1))


def test_load_array(voices_dir: Path) -> None:
    store = VoiceStore(None, None)
    src = pack(5).astype(np.float64)
    got = store.load(src)
    np.testing.assert_array_equal(got, src.astype(np.float32))
    got[0, 0, 0] = 123.0  # a copy: the caller's array is untouched
    assert src[0, 0, 0] != 123.0
    np.testing.assert_array_equal(store.load(src[:, 0, :]), src.astype(np.float32))


def test_weighted_mix(voices_dir: Path) -> None:
    store = VoiceStore(voices_dir, None)
    want = (2 * pack(1).astype(np.float64) + 1 * pack(3)) / 3
    np.testing.assert_allclose(store.load("bm_npy(2)+zf_bin(1)"), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(store.load(" bm_npy ( 0.5 ) + zf_bin(0.25) "), want, rtol=1e-6, atol=1e-7)


def test_comma_list_is_equal_weights(voices_dir: Path) -> None:
    store = VoiceStore(voices_dir, None)
    want = (pack(1).astype(np.float64) + pack(2) + ramp()) / 3
    np.testing.assert_allclose(store.load("bm_npy,ef_st,af_ramp"), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(store.load("bm_npy+ef_st+af_ramp"), want, rtol=1e-6, atol=1e-7)


def test_mix_may_name_a_path(voices_dir: Path) -> None:
    got = VoiceStore(None, None).load(f"{voices_dir / 'af_ramp.pt'}(3)+{voices_dir / 'bm_npy.npy'}(1)")
    np.testing.assert_allclose(got, (3 * ramp().astype(np.float64) + pack(1)) / 4, rtol=1e-6, atol=1e-7)


def test_unknown_voice_lists_available(voices_dir: Path) -> None:
    listed = r"unknown voice 'af_nobody'; available \(5\): af_ramp, bm_npy, ef_st, jf_bin, zf_bin$"
    with pytest.raises(VoiceError, match=listed):
        VoiceStore(voices_dir, None).load("af_nobody")
    with pytest.raises(VoiceError, match=r"af_alloy, af_aoede, .*, \.\.\.$"):
        VoiceStore(None, "hexgrad/Kokoro-82M").load("xx_nobody")
    with pytest.raises(VoiceError, match="no voices are available"):
        VoiceStore(None, None).load("af_heart")


@pytest.mark.parametrize("spec", [
    "af_ramp(2", "(2)", "af_ramp++bm_npy", "af_ramp,", "af_ramp(x)", "af_ramp(0)", "af_ramp(-1)",
    "af_ramp(nan)", "af_ramp(inf)", "af_ramp(1)(2)", "   ",
])
def test_malformed_mix(voices_dir: Path, spec: str) -> None:
    with pytest.raises(VoiceError):
        VoiceStore(voices_dir, None).load(spec)


@pytest.mark.parametrize(("arr", "match"), [
    (np.zeros((510, 2, 256), np.float32), r"shape \(510, 2, 256\)"),
    (np.zeros((509, 1, 256), np.float32), r"shape \(509, 1, 256\)"),
    (np.zeros((510, 1, 256), np.int32), "dtype int32"),
    (np.full((510, 1, 256), np.nan, np.float32), "NaN"),
])
def test_bad_arrays(arr: np.ndarray, match: str) -> None:
    with pytest.raises(VoiceError, match=match):
        VoiceStore(None, None).load(arr)


def test_bad_files(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path, None)
    np.save(tmp_path / "af_short.npy", np.zeros((10, 256), np.float32))
    with pytest.raises(VoiceError, match=r"af_short\.npy has shape \(10, 256\)"):
        store.load("af_short")
    (tmp_path / "af_cut.pt").write_bytes((TINY / "voice.pt").read_bytes()[:1000])
    with pytest.raises(VoiceError, match="cannot read voice file"):
        store.load("af_cut")
    save_file({"a": pack(1), "b": pack(2)}, tmp_path / "af_two.safetensors")
    with pytest.raises(VoiceError, match="none named 'voice'"):
        store.load("af_two")
    with pytest.raises(VoiceError, match="voice file not found"):
        store.load(str(tmp_path / "missing.pt"))
    shutil.copy(TINY / "tiny.pth", tmp_path / "af_dict.pt")
    with pytest.raises(VoiceError, match="is a dict, not an array"):
        store.load("af_dict")
    with pytest.raises(VoiceError, match=r"unknown voice file type '\.pth'"):
        store.load(str(TINY / "tiny.pth"))
    with pytest.raises(VoiceError, match="not int"):
        store.load(3)  # type: ignore[arg-type]


def test_hub_on_demand(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake(*, repo_id: str, filename: str, local_files_only: bool) -> str:
        calls.append((repo_id, filename, local_files_only))
        return str(TINY / "voice.pt")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    store = VoiceStore(None, "hexgrad/Kokoro-82M", local_files_only=True)
    np.testing.assert_array_equal(store.load("af_heart"), ramp())
    store.load("af_heart")
    assert calls == [("hexgrad/Kokoro-82M", "voices/af_heart.pt", True)]
    with pytest.raises(VoiceError, match="unknown voice"):
        store.load("af_not_official")
    assert len(calls) == 1


def test_hub_failure_is_a_voice_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(**_: object) -> str:
        raise OSError("Network is unreachable")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    with pytest.raises(VoiceError, match=r'voices/af_bella\.pt.*model="/path/to/dir"'):
        VoiceStore(None, "hexgrad/Kokoro-82M").load("af_bella")


def test_style_row_is_string_length_minus_one() -> None:
    p = np.arange(510 * 256, dtype=np.float32).reshape(510, 1, 256)
    # "h\u0259\u02c8lo\u028a": 6 characters (IPA), so row 5, whatever the token count.
    s = style_for(p, "h\u0259\u02c8lo\u028a")
    assert s.shape == (256,) and s.dtype == np.float32
    assert s[0] == 5 * 256 and s[255] == 5 * 256 + 255
    np.testing.assert_array_equal(style_for(p, "a"), p[0, 0])
    np.testing.assert_array_equal(style_for(p, "x" * 510), p[509, 0])
    np.testing.assert_array_equal(style_for(p.reshape(510, 256), "ab"), p[1, 0])


def test_style_row_bounds() -> None:
    p = ramp()
    with pytest.raises(InputError, match="empty"):
        style_for(p, "")
    with pytest.raises(InputError, match="511 characters"):
        style_for(p, "x" * 511)
    with pytest.raises(VoiceError, match="expected"):
        style_for(np.zeros((510, 3)), "a")


@pytest.mark.parametrize(("voice", "code"), [
    ("af_heart", "a"), ("bm_george", "b"), ("zf_xiaobei", "z"), ("PF_DORA", "p"),
    ("bm_george(2)+af_sky(1)", "b"), ("hf_alpha,if_sara", "h"), ("/tmp/x/ef_dora.pt", "e"),
])
def test_lang_code(voice: str, code: str) -> None:
    assert voice_lang_code(voice) == code


@pytest.mark.parametrize("voice", ["xx_unknown", "", "/tmp/voice.pt", "(2)"])
def test_lang_code_unknown(voice: str) -> None:
    with pytest.raises(VoiceError, match="cannot tell the language"):
        voice_lang_code(voice)


def test_absurd_voice_values_refused() -> None:
    with pytest.raises(VoiceError, match=r"values up to 1e\+30"):
        VoiceStore(None, None).load(np.full((510, 1, 256), 1e30, np.float32))
    edge = pack(5)
    edge[0, 0, 0] = -1000.0  # the bound itself is allowed
    assert VoiceStore(None, None).load(edge)[0, 0, 0] == -1000.0


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and len(message) <= 1000
    return message


@pytest.mark.parametrize("damage", [
    lambda data: data[: len(data) // 2],  # BadZipFile
    lambda data: b"not a zip at all",
    lambda data: data.replace(b"PK\x01\x02", b"PK\x01\x03"),
])
def test_corrupt_voices_bin_is_a_voice_error(voices_dir: Path, damage) -> None:
    path = voices_dir / "voices-v1.0.bin"
    path.write_bytes(damage(path.read_bytes()))
    store = VoiceStore(voices_dir, None)
    with pytest.raises(VoiceError, match="cannot read voice archive") as info:
        store.available()
    _one_line(info)
    with pytest.raises(VoiceError, match="cannot read voice archive"):
        store.load("zf_bin")
    np.testing.assert_array_equal(store.load("af_ramp"), ramp())  # other voices still load


def test_oversized_voice_files_refused_before_reading(voices_dir: Path, tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    np.save(big / "af_big.npy", np.zeros((600, 1024, 16), np.float64))  # 78 MB
    with pytest.raises(VoiceError, match="is not a voice file") as info:
        VoiceStore(big, None).load("af_big")
    _one_line(info)
    with open(big / "voices-v1.0.bin", "wb") as f:
        np.savez_compressed(f, af_huge=np.zeros((4096, 1024), np.float32))  # 16 MiB, deflated to KBs
    with pytest.raises(VoiceError, match="declares 16777344 bytes"):
        VoiceStore(big, None).load("af_huge")


def test_npy_header_must_match_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "af_lie.npy"
    np.save(path, pack(6))
    data = path.read_bytes()
    path.write_bytes(data.replace(b"(510, 1, 256)", b"(510, 9, 256)", 1))
    with pytest.raises(VoiceError, match="declares 4700160 bytes of data but holds 522240"):
        VoiceStore(tmp_path, None).load("af_lie")
    path.write_bytes(data.replace(b"'<f4'", b"'|O' ", 1))
    with pytest.raises(VoiceError, match=r"Python objects|not a readable"):
        VoiceStore(tmp_path, None).load("af_lie")


@pytest.mark.parametrize(("spec", "match"), [
    ("a" * 300, "unknown voice"),  # longer than a file name may be
    ("a" * 5000, "5000 characters long"),
    ("x/" * 1000, "voice file not found"),
    ("af_x\x00", "unknown voice"),
    ("+".join(["af_ramp"] * 65), "65 terms"),
])
def test_hostile_voice_specs(voices_dir: Path, spec: str, match: str) -> None:
    with pytest.raises(VoiceError, match=match) as info:
        VoiceStore(voices_dir, None).load(spec)
    _one_line(info)
