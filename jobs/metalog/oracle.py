"""Kafka's own decoding of metadata files (MetalogOracle.java against the 4.4.0 jars in .cache/jars/kafka).

Used by the tests as an independent, field-by-field oracle for our decoder. Compiles into .cache/ (ignored);
callers that share the machine run it under the heavy lock (`flock /tmp/isrflow-heavy.lock`).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JARS = ROOT / ".cache" / "jars" / "kafka"
OUT = ROOT / ".cache" / "metalog-oracle"
SRC = Path(__file__).with_name("oracle") / "MetalogOracle.java"
LOCK = "/tmp/isrflow-heavy.lock"


def available() -> bool:
    return bool(shutil.which("java") and shutil.which("javac") and list(JARS.glob("kafka-metadata-*.jar")))


def build() -> Path:
    cls = OUT / "MetalogOracle.class"
    if not cls.exists() or cls.stat().st_mtime < SRC.stat().st_mtime:
        OUT.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-d", str(OUT), "-cp", f"{JARS}/*", str(SRC)], check=True, capture_output=True,
                       timeout=300)
    return OUT


class LockBusy(Exception):
    """The shared heavy-job lock stayed busy (another JVM/Spark job on this machine)."""


def decode(files, timeout: int = 300, lock_wait: int = 240) -> list[dict]:
    build()
    cmd = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{OUT}:{JARS}/*", "MetalogOracle",
           *[str(f) for f in files]]
    if shutil.which("flock"):
        cmd = ["flock", "-w", str(lock_wait), "-E", "75", LOCK, *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + lock_wait)
    if p.returncode == 75:
        raise LockBusy(f"{LOCK} busy for {lock_wait} s")
    if p.returncode != 0:
        raise RuntimeError(f"MetalogOracle failed ({p.returncode}): {p.stderr[-2000:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
