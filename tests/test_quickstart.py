"""The quickstart (README command one) runs end to end and proves what it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def shapes(text: str) -> set[str]:
    """The step lines and table headings of a quickstart run, numbers and spacing left out:
    what the README's sample run must show. Progress lines ("  ...", the bar) and the closing
    "done in" vary from run to run."""
    out = set()
    for line in text.splitlines():
        if (line.startswith("[") and "  ... " not in line) or line.startswith("│ Stream "):
            out.add(" ".join(re.sub(r"\d[\d,.]*", "N", line).split()))
    return out


def test_quickstart_runs_and_proves_zero_lost_zero_duplicated(tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-m", "jsspark.quickstart", "--orders", "1500", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, env=env)
    text = out.stdout
    assert out.returncode == 0, text[-3000:] + out.stderr[-3000:]
    assert "ok   lost 0, duplicated 0" in text
    assert "ok   orders published 1500, landed 1500" in text
    assert "ok   republished eu orders 500 = 500" in text
    assert "FAIL" not in text
    sample = README.read_text().split("## The quickstart", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    assert shapes(sample) == shapes(text)
