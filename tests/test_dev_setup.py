"""The dev venv's start-up fix (``dev.py``'s ``PYSPARK_ZIP_LINE``): Spark puts its pyspark.zip
first on every Python process's path, where nothing can be cached as bytecode; the venv drops
the entry when it is its own pyspark's zip, and keeps any other."""

from __future__ import annotations

import importlib.util
import json
import os
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


def test_sources_are_compiled_even_where_python_writes_no_bytecode(tmp_path: Path) -> None:
    """``compile_sources`` leaves a current .pyc for every module under ``src``, which a
    process with PYTHONDONTWRITEBYTECODE set then imports instead of compiling the source."""
    dev = _dev()
    dev.ROOT = tmp_path
    module = tmp_path / "src" / "pkg" / "mod.py"
    module.parent.mkdir(parents=True)
    module.write_text("VALUE = 1\n")
    dev.compile_sources()
    cached = Path(importlib.util.cache_from_source(str(module)))
    assert cached.exists()
    module.write_text("VALUE = 22\n")  # a source changed since is compiled again
    later = module.stat().st_mtime + 10
    os.utime(module, (later, later))
    dev.compile_sources()
    header = cached.read_bytes()[:16]  # magic, flags, source mtime, source size: what an import checks
    assert header[:4] == importlib.util.MAGIC_NUMBER
    assert (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")) == (int(later), 11)
    probe = f"import sys; sys.path.insert(0, {str(tmp_path / 'src')!r}); import pkg.mod; print(pkg.mod.VALUE)"
    out = subprocess.run([sys.executable, "-B", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["22"]
