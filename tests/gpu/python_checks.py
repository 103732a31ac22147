"""What the Python package's GPU scripts (tests/gpu/python_*.py) share: a record of named
checks and timings, printed as PASS/FAIL lines and written as JSON, and the comparisons."""
import json
import os


class Report:
    """Checks and timings of one script, written to ``OUT/NAME.json`` by :meth:`finish`."""

    def __init__(self, out: str, name: str):
        os.makedirs(out, exist_ok=True)
        self.path = os.path.join(out, f"{name}.json")
        self.name = name
        self.data = {"checks": {}, "timings": {}}
        self.failed = []

    def verdict(self, check: str, ok, detail: str = "", **extra):
        """Records `check` as passed when `ok`, with `detail` (and `extra` fields)."""
        self.data["checks"][check] = {"pass": bool(ok), "detail": detail, **extra}
        print(f"{'PASS' if ok else 'FAIL'} {check} {detail}", flush=True)
        if not ok:
            self.failed.append(check)

    def finish(self) -> int:
        """Writes the JSON, prints the summary line; the exit status (1 when a check failed)."""
        with open(self.path, "w") as f:
            json.dump(self.data, f, indent=1)
        print("FAILED: " + ", ".join(self.failed) if self.failed else f"{self.name}: all checks passed")
        return 1 if self.failed else 0


def same_bits(a, b) -> bool:
    """Whether two torch tensors have the same dtype, shape and bytes."""
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def rel_rms(a, b) -> float:
    """‖a − b‖ / ‖b‖ in f32."""
    return float((a.float() - b.float()).norm() / b.float().norm())
