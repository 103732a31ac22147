"""Shared fixtures: the repository's root, a scratch cache per test, and the command-line
binary the bit-for-bit comparisons run."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Every test compiles into its own cache directory, so none reads another's steps."""
    d = tmp_path / "cache"
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(d))
    return d


@pytest.fixture(scope="session")
def tessel_cli():
    """The `tessel` binary: $TESSEL_BIN, else target/{debug,release}/tessel, else built with
    cargo (the README's test command builds target/debug/tessel first)."""
    env = os.environ.get("TESSEL_BIN")
    if env:
        return env
    for profile in ("debug", "release"):
        p = ROOT / "target" / profile / "tessel"
        if p.exists():
            return str(p)
    subprocess.run(["cargo", "build", "-p", "tessel"], cwd=ROOT, check=True)
    return str(ROOT / "target" / "debug" / "tessel")


def program(name: str) -> str:
    return str(ROOT / "tests" / "programs" / name)
