"""scripts/host_profile.py: its summary of a py-spy raw profile, and its errors (no GPU needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_modules import load_script

host_profile = load_script("host_profile")

# Three stacks as py-spy --native --format raw writes them: 6 samples launching through the driver
# (4 in an unnamed driver address, 2 in a named runtime function), 3 in the engine, 1 in Python.
ROOT = "<module> (host_profile.py:120);forward (kokoro_gpu/backends.py:430)"
LANE = "kokoro::Lane::run (_native.cpython-312-x86_64-linux-gnu.so)"
LAUNCH = "cudaLaunchKernelExC (_native.cpython-312-x86_64-linux-gnu.so)"
RAW = "\n".join(
    [
        f"{ROOT};{LANE};0x7f00aa01 (/usr/lib/libcuda.so.1) 4",
        f"{ROOT};{LANE};{LAUNCH};cudart::cudaApiLaunch (libcudart.so.13) 2",
        f"{ROOT};{LANE} 3",
        "<module> (host_profile.py:120) 1",
    ]
)


def shares(report: str, section: str) -> dict[str, float]:
    """The 'NN.N %  name' lines under `section` of a report, as {name: percent}."""
    lines = report.splitlines()
    start = lines.index(section) + 1
    out: dict[str, float] = {}
    for line in lines[start:]:
        if not line.strip():
            break
        percent, name = line.split(" %  ", 1)
        out[name] = float(percent)
    return out


def test_summary_by_library_and_function() -> None:
    report = host_profile.summarise(RAW.splitlines(), top=10)
    assert report.splitlines()[0] == "10 samples"
    assert shares(report, "by library (self time)") == {
        "CUDA driver": 40.0,
        "engine (_native)": 30.0,
        "CUDA runtime": 20.0,
        "python": 10.0,
    }
    # An unnamed address counts as its library; a named function keeps its name.
    assert shares(report, "self time, top 10") == {
        "[libcuda.so.1]": 40.0,
        "kokoro::Lane::run": 30.0,
        "cudart::cudaApiLaunch": 20.0,
        "<module>": 10.0,
    }
    inclusive = shares(report, "inclusive time, top 10")
    assert inclusive["<module>"] == 100.0
    assert inclusive["kokoro::Lane::run"] == 90.0
    assert inclusive["cudaLaunchKernelExC"] == 20.0


def test_summary_top_limits_each_list() -> None:
    report = host_profile.summarise(RAW.splitlines(), top=2)
    assert list(shares(report, "self time, top 2")) == ["[libcuda.so.1]", "kokoro::Lane::run"]
    assert len(shares(report, "inclusive time, top 2")) == 2


def test_summary_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file and a file that is not a raw profile: usage errors (exit 2), no traceback."""
    not_raw = tmp_path / "profile.svg"
    not_raw.write_text("<svg>flame graph</svg>\n")
    for path in (tmp_path / "missing.txt", not_raw):
        with pytest.raises(SystemExit) as exit_info:
            host_profile.main(["summary", str(path)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert str(path.name) in err and "Traceback" not in err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert host_profile.main(["summary", str(empty)]) == 0
    assert capsys.readouterr().out.strip() == "no samples"
