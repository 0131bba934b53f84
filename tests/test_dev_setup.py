"""The dev venv's start-up fix (``dev.py``'s ``PYSPARK_ZIP_LINE``): Spark puts its pyspark.zip
first on every Python process's path, where nothing can be cached as bytecode; the venv drops
the entry when it is its own pyspark's zip, and keeps any other."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dev() -> Any:
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pth_line_drops_only_its_own_site_packages_pyspark_zip(tmp_path: Path) -> None:
    dev = _dev()
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / dev.PYSPARK_ZIP_PTH).write_text(dev.PYSPARK_ZIP_LINE)
    own = site / "pyspark" / "python" / "lib" / "pyspark.zip"
    other = tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip"
    probe = (f"import json, site, sys; sys.path[:0] = [{str(own)!r}, {str(other)!r}]; "
             f"site.addsitedir({str(site)!r}); print(json.dumps(sys.path))")
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stderr == ""  # site reports a failing .pth line on stderr and goes on
    path = json.loads(out.stdout)
    assert str(own) not in path and str(other) in path and str(site) in path


@pytest.mark.spark
def test_spark_python_workers_import_pyspark_from_site_packages(spark: Any) -> None:
    """Under ``dev.py`` (the README's test command) a worker's pyspark is the compiled one."""
    files = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
    assert len(files) == 1 and ".zip" not in files[0] and files[0].endswith("site-packages/pyspark/__init__.py")
