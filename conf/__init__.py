"""Default engine configuration (`engine.properties`) and Spark settings (`spark.conf`)."""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _read_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            raise ValueError(f"{path} line {n}: expected key=value, got {line!r}")
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def load_defaults() -> dict[str, str]:
    """Engine defaults shipped with isrflow (Kafka config names)."""
    return _read_properties(HERE / "engine.properties")


def spark_defaults() -> dict[str, str]:
    """Spark settings for the streaming job (see research/spark_notes.md for why each)."""
    return _read_properties(HERE / "spark.conf")


def parse_config_file(path: str) -> dict[str, str]:
    """A user config: Kafka-style properties (key=value, # comments) or a JSON object."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        return {str(k): str(v) for k, v in json.loads(text).items()}
    return _read_properties(p)
