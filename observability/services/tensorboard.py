"""Peak GPU memory from a job's TensorBoard event files, a third source of the right-sizer's measurements (after
DCGM and the sharing layer): a training script that logs ``torch.cuda.max_memory_allocated()`` as a scalar into
its checkpoint directory tells the portal its peak even where no GPU metrics are scraped.

The files are read with the ``tensorboard`` package's own loader (``EventFileLoader``: record framing, CRCs, the
protobufs), never a parser of ours; ``tensorboard`` is an optional extra (``pip install .[tensorboard]``) because
it brings grpcio and protobuf. Without it ``peak_memory`` says so and the right-sizer uses its other sources.

Which scalars: a tag containing one of ``PEAK_TAGS`` (``max_memory_allocated``, ``max_memory_reserved``,
``peak_memory``). Units: bytes (what torch returns), unless the tag ends in ``_mib``/``_mb`` (MiB) or
``_gib``/``_gb`` (GiB). The peak is the largest value of any such tag in any event file under the directory.
A file that is not an event file, is cut short, or is larger than ``MAX_FILE_BYTES`` is skipped and named in
``skipped`` with the reason: one bad file does not hide the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

PEAK_TAGS = ("max_memory_allocated", "max_memory_reserved", "peak_memory")
MAX_FILE_BYTES = 256 * 1024 * 1024  # a scalar log this large is not one; reading it would stall the collector
MIB = 1024 * 1024
SOURCE = "tensorboard"


@dataclass
class TensorBoardPeak:
    peak_memory_mib: float | None  # None: no peak-memory scalar found
    tag: str = ""
    files: int = 0  # event files read
    skipped: list[str] = field(default_factory=list)  # "<file>: <why>"
    source: str = SOURCE


def describe(peak: TensorBoardPeak) -> str:
    """One line for the job page: the peak and where it was found, or that none was, and the files skipped."""
    files = f"{peak.files} event file{'s' if peak.files != 1 else ''}"
    if peak.peak_memory_mib is not None:
        text = f"peak {peak.peak_memory_mib / 1024:.1f} GiB ({peak.tag}) in {files}"
    elif peak.files:
        text = f"no peak-memory scalar in {files}"
    else:
        text = "no event files"
    if peak.skipped:
        text += "; skipped " + "; ".join(peak.skipped)
    return text[:300]


def _unit_mib(tag: str) -> float:
    """MiB per unit of a peak-memory tag's values."""
    low = tag.lower()
    if low.endswith(("_gib", "_gb")):
        return 1024.0
    if low.endswith(("_mib", "_mb")):
        return 1.0
    return 1.0 / MIB


def _value(v) -> float | None:
    if v.HasField("simple_value"):
        return float(v.simple_value)
    if v.HasField("tensor"):
        from tensorboard.util import tensor_util

        array = tensor_util.make_ndarray(v.tensor)
        return float(array.reshape(-1)[0]) if array.size else None
    return None


def peak_memory(directory: str | Path) -> TensorBoardPeak:
    """The peak GPU memory (MiB) the event files under ``directory`` logged (see the module's docstring)."""
    out = TensorBoardPeak(peak_memory_mib=None)
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    except ImportError:
        out.skipped.append("tensorboard is not installed (pip install .[tensorboard])")
        return out
    root = Path(directory)
    if not root.is_dir():
        out.skipped.append(f"{root}: not a directory")
        return out
    for path in sorted(root.rglob("*tfevents*")):
        if not path.is_file():
            continue
        size = path.stat().st_size
        if size == 0:
            out.skipped.append(f"{path.name}: empty")
            continue
        if size > MAX_FILE_BYTES:
            out.skipped.append(f"{path.name}: {size} bytes, more than {MAX_FILE_BYTES}")
            continue
        events = 0
        try:
            for event in EventFileLoader(str(path)).Load():
                events += 1
                for v in event.summary.value:
                    if not any(t in v.tag.lower() for t in PEAK_TAGS):
                        continue
                    value = _value(v)
                    if value is None:
                        continue
                    mib = value * _unit_mib(v.tag)
                    if out.peak_memory_mib is None or mib > out.peak_memory_mib:
                        out.peak_memory_mib, out.tag = mib, v.tag
        except Exception as e:  # noqa: BLE001 - a corrupt file is skipped and named, whatever the loader raised
            out.skipped.append(f"{path.name}: {type(e).__name__}: {e}"[:300])
            continue
        if not events:  # the loader stops quietly at a record it cannot frame: nothing read is no event file
            out.skipped.append(f"{path.name}: no event could be read (not an event file, or corrupt)")
            continue
        out.files += 1
    return out
