"""The compiled protocol core: protocol/ built with mypyc, opt-in (`ISRFLOW_CORE=compiled`).

protocol/'s Python source stays the single source. `./dev compile` (or `python -m jobs.compiled
build`) copies it into .cache/compiled/src/protocol and compiles every module there with mypyc into
C extension modules (~1 min on one core), beside a digest of the source it was built from. The
pure-Python package stays what every process imports by default (and what the tests, the mutation
tool and every traceback see).

With `ISRFLOW_CORE=compiled` in the environment, importing `jobs` (the CLI, the Spark engine's
Python workers, a parallel replay's workers) puts the build ahead of the source on sys.path, so
`import protocol` loads the extension modules. A build made from other source than today's
protocol/ is refused, never used: the two must give identical tables (tests/test_compiled_core.py
replays the same streams through both and compares every table).

Why mypyc and not a rewrite: the handlers' parameters are typed (Partition, Replica, ReplicaLog,
FollowerState) on the hot path, so compiled code reads their slots directly instead of through
Python's attribute protocol; see docs/core-speed.md for what it gains and what still bounds it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "protocol"
DIGEST_FILE = "SOURCE_DIGEST"
ENV = "ISRFLOW_CORE"
DIR_ENV = "ISRFLOW_COMPILED_DIR"


class CompiledCoreError(RuntimeError):
    """The compiled core was asked for but cannot be used (not built, stale, or too late)."""


def build_dir() -> Path:
    """Where the build lives: $ISRFLOW_COMPILED_DIR, else .cache/compiled of this checkout."""
    return Path(os.environ.get(DIR_ENV) or ROOT / ".cache" / "compiled")


def source_digest(source: Path = SOURCE) -> str:
    """sha256 over every .py file of protocol/ (relative path and bytes), in path order."""
    h = hashlib.sha256()
    for f in sorted(source.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        h.update(f.relative_to(source).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def built_digest(out: Path | None = None) -> str | None:
    f = (out or build_dir()) / "src" / DIGEST_FILE
    return f.read_text().strip() if f.is_file() else None


def is_current(out: Path | None = None) -> bool:
    return built_digest(out) == source_digest()


def build(out: Path | None = None, *, force: bool = False, log=print) -> Path:
    """Compile protocol/ into out/src (kept if already built from today's source). Built in a
    temporary directory beside out and renamed into place, so a failed or concurrent build never
    leaves a half-built tree where an activation would look."""
    out = out or build_dir()
    digest = source_digest()
    if not force and built_digest(out) == digest:
        return out / "src"
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out))
    try:
        src = tmp / "src"
        shutil.copytree(SOURCE, src / "protocol", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        log(f"compiling protocol/ with mypyc into {out / 'src'} ...")
        r = subprocess.run([sys.executable, "-m", "mypyc", "protocol"], cwd=src, capture_output=True, text=True)
        if r.returncode != 0:
            raise CompiledCoreError(f"mypyc failed (exit {r.returncode}):\n{r.stdout[-4000:]}{r.stderr[-4000:]}")
        shutil.rmtree(src / "build", ignore_errors=True)
        (src / DIGEST_FILE).write_text(digest + "\n")
        old = out / "src"
        if old.exists():
            shutil.rmtree(old)
        src.rename(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "src"


def activate() -> Path:
    """Put the compiled core ahead of the source on sys.path (before anything imports protocol)."""
    out = build_dir()
    src = out / "src"
    digest = built_digest(out)
    if digest is None:
        raise CompiledCoreError(f"{ENV}=compiled, but there is no compiled core in {out}: run ./dev compile")
    if digest != source_digest():
        raise CompiledCoreError(f"{ENV}=compiled, but the compiled core in {out} was built from another "
                                f"protocol/ than this checkout's: run ./dev compile")
    mod = sys.modules.get("protocol")
    if mod is not None and Path(mod.__file__).suffix == ".py":
        raise CompiledCoreError(f"{ENV}=compiled, but the pure-Python protocol package is imported already")
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    return src


def activate_from_env() -> None:
    """What `import jobs` does: $ISRFLOW_CORE unset, empty or `pure`: nothing; `compiled`: activate();
    anything else, or a build that cannot be used: a message and exit code 2."""
    core = os.environ.get(ENV)
    if core in (None, "", "pure"):
        return
    try:
        if core != "compiled":
            raise CompiledCoreError(f"{ENV}={core!r}: use compiled (protocol/ built by ./dev compile) or pure")
        activate()
    except CompiledCoreError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def is_compiled() -> bool:
    """Whether the protocol package this process runs is the compiled one."""
    import protocol.cluster
    return Path(protocol.cluster.__file__).suffix != ".py"


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        try:
            src = build(force="--force" in argv)
        except CompiledCoreError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"compiled core: {src} (use it with {ENV}=compiled)")
        return 0
    print("usage: python -m jobs.compiled build [--force]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
