"""The tensor-core convs' launch plan (native/ops/conv/igemm_plan.h), on the host: no GPU.

The plan is host code; this test compiles it with the system C++ compiler into a small driver
(native/tools/conv_plan_tool.cpp) and checks its tile choices against the rule it states, worked
out by hand for an H100's 132 SMs:
- the wide time tile (128) where its blocks give every SM a block (2 x blocks >= 2 x SMs / streams),
  one split of the reduction;
- else the narrow tile (64), the reduction's 64-channel chunks split over enough blocks to give
  every SM two, no split empty;
- grid rows of 128 / phases channels;
- two blocks per SM where their shared memory, a 1 KB static bound and the SM's 1 KB per block fit.
Skipped where no C++ compiler or no CUDA headers are found.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from host_tools import build_tool, needs_cxx_and_cuda_headers

H100_SMS = 132

pytestmark = needs_cxx_and_cuda_headers


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "conv_plan_tool"
    return build_tool(out, ["native/tools/conv_plan_tool.cpp"], cuda_headers=True)


def plan(
    tool: Path, cin: int, cout: int, tout: int, *, phases: int = 1, split: bool = False, streams: int = 1
) -> tuple[int, ...]:
    """(tile, splits, chunks per split, row tiles) on an H100."""
    args = ["plan", str(H100_SMS), str(cin), str(cout), str(phases), str(tout), str(int(split)), str(streams)]
    out = subprocess.run([str(tool), *args], capture_output=True, text=True, check=True).stdout
    return tuple(int(v) for v in out.split())


def test_long_input_takes_the_wide_tile(tool: Path) -> None:
    # 512 -> 256 channels over 20000 steps: 157 time tiles x 2 row tiles, far past 264 blocks.
    assert plan(tool, 512, 256, 20000) == (128, 1, 8, 2)  # 512 channels: 8 chunks, one split


def test_short_input_splits_the_reduction(tool: Path) -> None:
    # The decoder's 1090-channel conv on 100 frames: ld 1096, 18 chunks; 1 x 8 wide blocks give 16 < 264,
    # so the narrow tile: 2 x 8 = 16 blocks, ceil(264 / 16) = 17 splits asked, 2 chunks each, 9 splits.
    assert plan(tool, 1090, 1024, 100) == (64, 9, 2, 8)


def test_split_operands_triple_the_chunks(tool: Path) -> None:
    # 512 channels split: 3 x 8 = 24 chunks; 4 x 4 = 16 narrow blocks, 17 splits asked, 2 chunks each: 12.
    assert plan(tool, 512, 512, 256, split=True) == (64, 12, 2, 4)


def test_streams_share_the_target(tool: Path) -> None:
    # Four streams: 66 blocks each. 16 x 2 wide blocks (2000 steps) give 64 < 66: narrow, 32 x 2 blocks,
    # 2 splits of 4 chunks; 17 x 2 (2100 steps) give 68: wide.
    assert plan(tool, 512, 256, 2000, streams=4) == (64, 2, 4, 2)
    assert plan(tool, 512, 256, 2100, streams=4) == (128, 1, 8, 2)
    # One stream: 68 < 264, narrow: 33 x 2 blocks, ceil(264 / 66) = 4 splits of 2 chunks.
    assert plan(tool, 512, 256, 2100) == (64, 4, 2, 2)


def test_splits_never_exceed_the_chunks(tool: Path) -> None:
    # One block in all asks for 264 splits; 64 channels hold one chunk: one split of it.
    assert plan(tool, 64, 32, 10) == (64, 1, 1, 1)


def test_phases_narrow_the_row_tiles(tool: Path) -> None:
    # A transposed conv of stride 8: 16 channels' 8 phases per 128-row tile, 256 channels in 16 row tiles.
    assert plan(tool, 512, 256, 40000, phases=8)[3] == 16
    assert plan(tool, 512, 256, 40000, phases=5)[3] == 11  # 25 channels per tile


@pytest.mark.parametrize(("smem", "fits"), [(114688, 1), (114689, 0)])
def test_two_blocks_fit(tool: Path, smem: int, fits: int) -> None:
    # An H100's 233472 bytes per SM: 2 x (smem + 1024 + 1024) <= 233472 up to 114688 bytes.
    out = subprocess.run([str(tool), "fits", "233472", str(smem)], capture_output=True, text=True, check=True)
    assert int(out.stdout) == fits
