"""Kafka 4.4.0's own classes as test oracles: a single-file Java program under java/lab/, run from
the Kafka JARs (`./dev setup` resolves them), fed one request per line, answering one line each."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from jobs.jars import ROOT, kafka_classpath

needs_kafka_java = pytest.mark.skipif(kafka_classpath() is None or shutil.which("java") is None,
                                      reason="needs the Kafka 4.4.0 JARs (./dev setup) and java")


def _command(oracle: str, *args: str) -> list[str]:
    """The command line that runs java/lab/<oracle>.java with its arguments `args`."""
    return ["java", "-cp", kafka_classpath(), str(ROOT / "java" / "lab" / f"{oracle}.java"), *args]


def ask(oracle: str, lines: list[str], *args: str) -> list[str]:
    """java/lab/<oracle>.java's answer lines to `lines` (its arguments `args`)."""
    r = subprocess.run(_command(oracle, *args), input="".join(line + "\n" for line in lines), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.splitlines()


class Session:
    """One running java/lab/<oracle>.java for questions that depend on earlier answers: `ask1`
    writes one line and reads its one answer line (the oracles flush after each)."""

    def __init__(self, oracle: str, *args: str):
        self.proc = subprocess.Popen(_command(oracle, *args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)

    def ask1(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, "the oracle ended early"
        return answer.rstrip("\n")

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0
