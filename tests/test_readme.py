"""README.md's examples, executed, so that they cannot rot.

Conventions for README.md:

- Every ```python block runs in a fresh Python process whose working directory
  is an empty temporary directory holding ``models/demo``: a random-weights
  model directory (what the quick start's ``write_model_dir('models/demo')``
  writes). The hub is off (``HF_HUB_OFFLINE=1``). Blocks share nothing: each
  defines what it uses.
- Shell blocks (```bash, ```sh, ```shell, ```console) run, with ``bash -e`` in
  the same kind of directory, when they sit in a section whose heading says
  "Quick start", or when ``<!-- test -->`` precedes them. Commands that install
  or test the checkout itself (``pip``, ``git``, ``cd``, ``pytest``) are left
  out, also as parts of an ``&&`` chain: the test runs inside an installed
  checkout. ``$ `` prompts are stripped.
- ``<!-- no-test -->`` before a block leaves it out (GPU-only commands, servers,
  output listings).
- ``<!-- test: real-model -->`` before a block says that it needs the real
  ``kokoro-onnx-int8`` model; it is skipped, with one line saying why, where
  that model cannot be built.

A block passes when it exits with status 0 within the time limit.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console"})
# Commands that act on the checkout (installing, cloning, testing it), not on the package.
CHECKOUT_COMMANDS = ("pip ", "pip3 ", "python -m pip ", "git ", "cd ", "pytest", "python -m pytest")
BLOCK_TIMEOUT_S = 600
_FENCE = re.compile(r"^```(\w*)\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(.*)$")
_MARKER = re.compile(r"^<!--\s*(no-test|test(?::\s*[\w-]+)?)\s*-->$")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # of the opening fence, 1-based
    section: str
    markers: frozenset[str]

    @property
    def id(self) -> str:
        return f"L{self.line}-{self.lang}"


def readme_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, with their section and the markers before them."""
    blocks = []
    lines = text.splitlines()
    section = ""
    i = 0
    while i < len(lines):
        heading = _HEADING.match(lines[i])
        fence = _FENCE.match(lines[i])
        if heading:
            section = heading.group(1).strip()
        elif fence:
            start = i
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            markers = set()
            j = start - 1
            while j >= 0 and (not lines[j].strip() or _MARKER.match(lines[j].strip())):
                marker = _MARKER.match(lines[j].strip())
                if marker:
                    markers.add(re.sub(r"\s+", "", marker.group(1)))
                j -= 1
            blocks.append(Block(fence.group(1).lower(), "\n".join(body) + "\n", start + 1, section,
                                frozenset(markers)))
        i += 1
    return blocks


def shell_commands(code: str) -> str:
    """A shell block as a script: prompts stripped, commands on the checkout left out."""
    joined = re.sub(r"[ \t]*\\\n\s*", " ", code)
    kept = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("&&")]
        parts = [p for p in parts if not p.startswith(CHECKOUT_COMMANDS)]
        if parts:
            kept.append(" && ".join(parts))
    return "\n".join(kept) + "\n"


def _runs(block: Block) -> bool:
    if "no-test" in block.markers:
        return False
    if block.lang == "python":
        return True
    if block.lang in SHELL_LANGS:
        return "test" in block.markers or "test:real-model" in block.markers or (
            "quick start" in block.section.lower()
        )
    return False


_ALL_BLOCKS = readme_blocks(README.read_text(encoding="utf-8")) if README.is_file() else []
BLOCKS = [b for b in _ALL_BLOCKS if _runs(b)]


@pytest.fixture(scope="module")
def real_model_reason() -> str | None:
    """Why the real model cannot be used here (None when it can)."""
    try:
        from kokoro_gpu.real_model import real_model_dir

        real_model_dir()
    except Exception as e:  # any failure to build it means: skip those blocks
        return f"needs the kokoro-onnx-int8 model: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    return None


def _workdir(tmp_path: Path, demo_model_dir: Path) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "demo").symlink_to(demo_model_dir, target_is_directory=True)
    return tmp_path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_block_runs(block: Block, tmp_path: Path, demo_model_dir: Path,
                           real_model_reason: str | None) -> None:
    if "test:real-model" in block.markers and real_model_reason is not None:
        pytest.skip(real_model_reason)
    cwd = _workdir(tmp_path, demo_model_dir)
    if block.lang == "python":
        command = [sys.executable, "-c", block.code]
    else:
        command = ["bash", "-e", "-c", shell_commands(block.code)]
    run = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True,
                         timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, (
        f"README.md line {block.line} ({block.lang}, section {block.section!r}) exited with "
        f"{run.returncode}:\n{block.code}\n--- stderr ---\n{run.stderr[-4000:]}"
    )


def test_readme_has_runnable_examples() -> None:
    assert any(b.lang == "python" for b in BLOCKS), "README.md has no ```python example to run"


def test_the_demo_model_dir_is_ignored_and_readable(demo_model_dir: Path) -> None:
    """The README's demo model lands in an ignored path, its files with the mode a plain open() gives."""
    paths = re.findall(r"write_model_dir\(\s*['\"]([^'\"]+)['\"]", README.read_text(encoding="utf-8"))
    assert paths, "README.md never writes the demo model dir"
    if (ROOT / ".git").exists():
        for path in paths:
            # A file inside it: a pattern such as "/models/" matches directories only.
            ignored = subprocess.run(["git", "check-ignore", "-q", f"{path}/config.json"], cwd=ROOT)
            assert ignored.returncode == 0, f"{path} (README's demo model dir) is not in .gitignore"
    umask = os.umask(0)
    os.umask(umask)
    for f in demo_model_dir.rglob("*"):
        if f.is_file():
            assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, f


def test_block_parsing_and_markers() -> None:
    text = (
        "# Title\n\n## Quick start\n\n```bash\n$ pip install . && kokoro-speak hi -o a.wav\n```\n\n"
        "<!-- no-test -->\n```python\nimport gpu_only\n```\n\n## Serve\n\n```bash\nkokoro-serve\n```\n\n"
        "<!-- test -->\n```sh\ncd somewhere\nkokoro-speak \\\n  there -o b.wav  # comment\n```\n\n"
        "<!-- test: real-model -->\n\n```python\nprint(1)\n```\n"
    )
    blocks = readme_blocks(text)
    assert [(b.lang, b.section, sorted(b.markers)) for b in blocks] == [
        ("bash", "Quick start", []),
        ("python", "Quick start", ["no-test"]),
        ("bash", "Serve", []),
        ("sh", "Serve", ["test"]),
        ("python", "Serve", ["test:real-model"]),
    ]
    assert [_runs(b) for b in blocks] == [True, False, False, True, True]
    assert shell_commands(blocks[0].code) == "kokoro-speak hi -o a.wav\n"
    assert shell_commands(blocks[3].code) == "kokoro-speak there -o b.wav  # comment\n"
