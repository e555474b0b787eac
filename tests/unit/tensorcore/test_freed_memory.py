"""A PNode's freed tensors go back to the OS (`map_large_allocations`): with glibc's default, a block
freed after a larger one stays in malloc's heap, resident, and a step's holes add up to hundreds of MiB."""

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import sys
    import torch
    from computeall.tensorcore.backend import map_large_allocations

    def rss_kib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    mapped = map_large_allocations() if sys.argv[1] == "fixed" else False
    torch.ones(4 << 20)  # 16 MiB, freed at once: glibc's default raises its mmap threshold to it
    before = rss_kib()
    freed = [torch.ones(1 << 20) for _ in range(8)]  # 8 x 4 MiB, below the raised threshold: from the heap
    kept = torch.ones(1 << 16)  # a tensor that lives on above them, as a step's kept activations do
    del freed  # holes below the heap's top: glibc gives back only from the top
    print(mapped, (rss_kib() - before) // 1024)
""")


def probe(mode: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux only")
def test_freed_tensors_go_back_to_the_os():
    mapped, resident_after_free = probe("fixed")
    assert mapped, "mallopt refused the threshold"
    assert resident_after_free < 4, f"{resident_after_free} MiB of freed tensors still resident"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux only")
def test_without_it_glibc_keeps_them():  # what the setting is for: if this stops holding, it may go
    _, resident_after_free = probe("default")
    assert resident_after_free >= 16, f"glibc returned freed heap memory by itself ({resident_after_free} MiB kept)"
