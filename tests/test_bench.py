"""scripts/bench.py's power sampler against a stand-in nvidia-smi (no GPU needed)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from script_modules import load_script

bench = load_script("bench")


def fake_smi(directory: Path, lines: list[str], cap_field: bool) -> None:
    """An nvidia-smi that prints `lines` once under -lms and then waits to be stopped, and refuses
    the power-cap field unless cap_field (an older driver)."""
    body = "".join(f'echo "{line}"\n' for line in lines)
    script = directory / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *sw_power_cap*) [ "{int(cap_field)}" = 1 ] || exit 2;; esac\n'
        'case "$*" in *-lms*) ;; *) exit 0;; esac\n'
        f"{body}exec sleep 30\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def sample(monkeypatch: pytest.MonkeyPatch, path: str) -> str:
    monkeypatch.setenv("PATH", path)
    with bench.PowerSampler(interval_ms=20) as power:
        time.sleep(0.5)
    return power.summary()


def test_power_sampler_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Medians of power and clock, the lowest clock, and the share of samples under the cap."""
    fake_smi(tmp_path, ["700.4, 1800, Active", "600.0, 1980, Not Active", "690.0, 1620, Active"], True)
    text = sample(monkeypatch, f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert text == "GPU 690 W, SM 1800 MHz (min 1620), power-capped 67%"


def test_power_sampler_without_cap_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver without the power-cap field: power and clock alone."""
    fake_smi(tmp_path, ["650.0, 1900"], False)
    text = sample(monkeypatch, f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert text == "GPU 650 W, SM 1900 MHz (min 1900)"


def test_power_sampler_without_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No nvidia-smi on PATH: no samples, an empty note."""
    assert sample(monkeypatch, str(tmp_path)) == ""
