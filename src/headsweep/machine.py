"""The machine a run or a timing belongs to. Speed, and bf16 numerics, are comparable only within one, so
results.json and the benchmarks name it."""

from __future__ import annotations

import platform
import re
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), e.g. 'AMD EPYC 7B13' or 'Intel(R) Xeon(R) Processor'."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def cpu_class() -> str:
    """The CPU class the speed depends on: AVX2 / AVX-512, and whether it has bf16 matmul units."""
    capability = torch.backends.cpu.get_cpu_capability()  # e.g. AVX2, AVX512
    if torch.cpu._is_amx_tile_supported():
        return f"{capability} + AMX (bf16 units)"
    if torch.cpu._is_avx512_bf16_supported():
        return f"{capability} + AVX512-BF16 (bf16 units)"
    return f"{capability}, no bf16 units"


def cpu_name() -> str:
    """Model and class in one line, for benchmark output."""
    return f"{cpu_model()}, {cpu_class()}"


# What a process's CUDA context holds beyond torch's allocator, which torch's counters do not see.
CUDA_CONTEXT_GIB = 0.6


def describe() -> dict:
    """What results.json records about the machine that trained a run; on a GPU also this process's peak of
    GPU memory (torch's reserved peak plus the CUDA context): what packing more jobs per card is sized by."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    record = {"cpu": cpu_model(), "cpu_class": cpu_class(), "gpu": gpu, "torch": torch.__version__}
    if gpu is not None and torch.cuda.is_initialized():
        record["gpu_memory_peak_gib"] = round(torch.cuda.max_memory_reserved() / 2**30 + CUDA_CONTEXT_GIB, 2)
    return record


NOT_RECORDED = "not recorded"  # a run from before results.json named its machine
# The config key (conf/train.yaml) that puts a run's class in its identity where set (sweeps.classes): it keeps two
# classes' runs apart in the store and is no setting of the experiment otherwise
CLASS_KEY = "machine_class"


def run_class(machine: dict | None) -> str:
    """A run's machine class from results.json's `machine`: the GPU model where it trained on one (the GPU did the
    arithmetic), else the CPU class (cpu_class); NOT_RECORDED for a run from before the record named it. bf16
    kernels differ between classes, so a comparison stays within one (reports.pages.verdicts)."""
    if not machine:
        return NOT_RECORDED
    return machine.get("gpu") or machine.get("cpu_class") or NOT_RECORDED


def this_class(on_gpu: bool) -> str | None:
    """This machine's class as run_class names a run trained here: the GPU model when the run trains on a GPU
    (None where torch sees none), else the CPU class."""
    if on_gpu:
        return torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return cpu_class()


def class_slug(machine_class: str) -> str:
    """A class as a part of a run name: 'AVX512 + AMX (bf16 units)' -> 'avx512-amx', 'AVX512 + AVX512-BF16 (bf16
    units)' -> 'avx512-bf16', 'AVX2, no bf16 units' -> 'avx2-no-bf16', 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    words = re.split(r"[^a-z0-9]+", machine_class.lower().replace("(bf16 units)", "").replace(" units", ""))
    words = list(dict.fromkeys(w for w in words if w))  # AVX512 + AVX512-BF16: avx512 once
    if words and words[0] == "nvidia":  # a GPU: its model, the first word with a digit
        words = [next((w for w in words if any(c.isdigit() for c in w)), "gpu")]
    return "-".join(words)


def label(machine: dict | None) -> str:
    """A run's machine in a report: the GPU where it had one, else the CPU and its class."""
    if not machine:
        return NOT_RECORDED
    return machine["gpu"] or f"{machine['cpu']} ({machine['cpu_class']})"
