"""forkcore's kmod backend, the parts that run without the module: ioctl ABI, page comparison, detection.

The end-to-end test (CRIU clones of a workspace mapping holders) runs in a qemu guest:
tests/kmod/test_kmod_forkcore_vm.py.
"""
from __future__ import annotations

import re
import struct
from pathlib import Path

from forkcore import kmod_backend as kb
from forkcore.backends import KMOD_DEVICE, backend_report

HEADER = Path(__file__).resolve().parents[2] / "kmod" / "bunshin_cow.h"
PAGE = 4096


def test_ioctl_numbers_and_struct_layout_match_the_header():
    text = HEADER.read_text()
    assert int(re.search(r"BUNSHIN_COW_HOLDER_SHIFT\s+(\d+)", text).group(1)) == kb.HOLDER_SHIFT
    assert "0xB5" in text
    # struct bunshin_cow_capture: s32 pid, u32 flags, u64 start, u64 len, u32 holder, u32 reserved, 3 x u64
    assert struct.calcsize(kb._CAPTURE_FMT) == 56
    assert struct.calcsize(kb._STATS_FMT) == 32
    assert kb.BUNSHIN_COW_CAPTURE == 0xC038B501  # _IOWR(0xB5, 1, 56)
    assert kb.BUNSHIN_COW_RELEASE == 0x4004B502  # _IOW(0xB5, 2, __u32)
    assert kb.BUNSHIN_COW_STATS == 0x8020B503  # _IOR(0xB5, 3, 32)
    assert kb.mmap_offset(3) == 3 << 40


def test_diff_pages_finds_pages_changed_after_the_dump():
    n = 600  # crosses the 256-page zero-comparison chunk
    dumped = {o * PAGE: bytes([o % 251 + 1]) * PAGE for o in range(0, 300)}  # pages 300.. were holes
    holder = bytearray(n * PAGE)
    for off, data in dumped.items():
        holder[off:off + PAGE] = data
    assert kb._diff_pages(bytes(holder), dumped, n * PAGE) == []
    holder[5 * PAGE + 7] ^= 0xFF  # the source wrote a dumped page after the dump
    holder[450 * PAGE + 1] = 1  # ... and a page that was a hole at the dump
    holder[599 * PAGE + PAGE - 1] = 9
    assert kb._diff_pages(bytes(holder), dumped, n * PAGE) == [5 * PAGE, 450 * PAGE, 599 * PAGE]


def test_converted_vmas_are_memfiles_rule_restricted_to_vmas_with_dumped_pages():
    anon = (1 << 0) | (1 << 9)  # REGULAR | ANON_PRIVATE
    vmas = [
        {"start": 0x1000, "end": 0x5000, "status": anon, "flags": 0x22, "prot": 3},
        {"start": 0x5000, "end": 0x8000, "status": anon, "flags": 0x22, "prot": 3},  # no dumped page
        {"start": 0x9000, "end": 0xA000, "status": anon | (1 << 1), "flags": 0x122, "prot": 3},  # stack
        {"start": 0xA000, "end": 0xC000, "status": anon, "flags": 0x22, "prot": 3},
    ]
    entries = [{"vaddr": 0x2000, "nr_pages": 1, "flags": 4}, {"vaddr": 0x9000, "nr_pages": 1, "flags": 4},
               {"vaddr": 0xB000, "nr_pages": 1, "flags": 0}]  # not present: not a reason to convert
    assert [v["start"] for v in kb._converted_vmas(vmas, entries)] == [0x1000]


def test_backend_reports_why_it_is_unavailable_without_the_device():
    why = backend_report()["kmod"]
    if KMOD_DEVICE.exists():
        assert why is None or "kmod" in why
    else:
        assert why and "bunshin_cow" in why
