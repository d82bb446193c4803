"""A real Apache Kafka 4.4.0 KRaft cluster on loopback, from the cached JARs (`./dev setup`).

    with KafkaCluster(workdir, brokers=3) as c:
        c.bootstrap_servers          # "127.0.0.1:PORT,..."
        c.kill(2, signal.SIGKILL); c.start(2)
    # every JVM is gone here (process groups killed), even on errors / SIGTERM / Ctrl-C

Layout: one controller-only node (id 100, `process.roles=controller`, a dynamic quorum formatted with
`kafka.tools.StorageTool format --standalone`) and N brokers (ids 1..N), each its own
`java -cp '<jars>/*' kafka.Kafka server.properties` process in its own process group, on free
127.0.0.1 ports. Brokers get their `meta.properties` written directly (what `StorageTool format
--no-initial-controllers` writes), which saves one JVM start per broker.

Every process this module starts is recorded in a module-level registry; an atexit hook and a
SIGTERM handler (installed while a cluster is open in the main thread) kill whatever is left.
"""
from __future__ import annotations

import atexit
import base64
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

from jobs.jars import ROOT, kafka_classpath

KAFKA_VERSION = "4.4.0"
CONTROLLER_ID = 100
JVM_OPTS = ["-Xmx384m", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"]

# Fast test timings. Shared by controller and brokers unless noted; recorded in every manifest.
DEFAULTS: dict[str, str] = {
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
    "replica.lag.time.max.ms": "4000",              # broker: ISR shrink ~4-5 s after a replica stops
    "metadata.log.max.record.bytes.between.snapshots": "4000",   # a snapshot every ~50 records
    "metadata.max.idle.interval.ms": "5000",        # NoOp records every 5 s instead of 500 ms
    "unclean.leader.election.interval.ms": "3000",  # controller: periodic unclean election check
    "auto.leader.rebalance.enable": "false",        # preferred elections only when asked for
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
    "group.initial.rebalance.delay.ms": "0",
}

# every live Popen started by this module, for the atexit / signal cleanup
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def _register(p: subprocess.Popen) -> None:
    with _LIVE_LOCK:
        _LIVE.add(p)


def _kill_group(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(p.pid, sig)      # the process was started as a group leader (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all_started() -> None:
    """SIGKILL every process group this module started and that is still registered."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
        _LIVE.clear()
    for p in procs:
        if p.poll() is None:
            _kill_group(p, signal.SIGCONT)
            _kill_group(p, signal.SIGKILL)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


atexit.register(kill_all_started)


def _die_with_parent() -> None:
    """preexec_fn: ask Linux to SIGKILL the child when the Python process that started it dies
    (covers a SIGKILLed orchestrator, where atexit and finally never run)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except Exception:
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def random_uuid() -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of 16 random bytes, no padding (22 chars)."""
    while True:
        b = uuid.uuid4().bytes
        if b[:8] != b"\0" * 8:      # Kafka reserves uuids whose high half is 0
            return base64.urlsafe_b64encode(b).decode().rstrip("=")


def now_ms() -> int:
    return int(time.time() * 1000)


LOG4J2 = """\
status = error
appender.f.type = File
appender.f.name = F
appender.f.fileName = ${sys:lab.log}
appender.f.layout.type = PatternLayout
appender.f.layout.pattern = [%d{ISO8601}] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.f.ref = F
logger.req.name = kafka.request.logger
logger.req.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
"""


def _props(d: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in d.items())


class Node:
    def __init__(self, node_id: int, role: str, port: int, home: Path, props: dict[str, str]):
        self.id, self.role, self.port, self.home, self.props = node_id, role, port, home, props
        self.proc: subprocess.Popen | None = None
        self.log = home / "server.log"
        self.starts = 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class KafkaCluster:
    """One controller-only node and `brokers` brokers on 127.0.0.1 (see module docstring).

    `overrides` are merged over DEFAULTS into every node's server.properties; keys prefixed
    `controller:` or `broker:` go only to that role (e.g. {"broker:replica.lag.time.max.ms": "8000"})."""

    def __init__(self, workdir, brokers: int = 3, overrides: dict | None = None,
                 start_timeout: float = 90.0):
        cp = kafka_classpath()
        if cp is None:
            raise RuntimeError("Kafka JARs not found in .cache/jars/kafka: run ./dev setup")
        self.classpath = cp
        self.workdir = Path(workdir).resolve()
        self.n_brokers = brokers
        self.overrides = dict(overrides or {})
        self.start_timeout = start_timeout
        self.cluster_id = random_uuid()
        self.timeline: list[dict] = []
        self.controller: Node | None = None
        self.brokers: dict[int, Node] = {}
        self._old_sigterm = None
        self._drivers: list = []

    # -- configuration -------------------------------------------------------------------
    def _merged(self, role: str) -> dict[str, str]:
        out = dict(DEFAULTS)
        for k, v in self.overrides.items():
            if ":" in k:
                r, key = k.split(":", 1)
                if r == role:
                    out[key] = str(v)
            else:
                out[k] = str(v)
        return out

    def config(self) -> dict:
        """What the manifest records: the effective server.properties of every node."""
        return {"controller": self.controller.props if self.controller else None,
                "brokers": {str(i): n.props for i, n in self.brokers.items()},
                "defaults": dict(DEFAULTS), "overrides": self.overrides,
                "jvm_opts": JVM_OPTS}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.brokers.values())

    @property
    def controller_bootstrap(self) -> str:
        return f"127.0.0.1:{self.controller.port}"

    @property
    def metadata_dir(self) -> Path:
        return self.controller.home / "data" / "__cluster_metadata-0"

    @property
    def ports(self) -> dict:
        return {"controller": self.controller.port, **{str(i): n.port for i, n in self.brokers.items()}}

    def event(self, event: str, **detail) -> dict:
        e = {"ms": now_ms(), "event": event, **detail}
        self.timeline.append(e)
        return e

    def _layout(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j2.properties").write_text(LOG4J2)
        cport = free_port()
        rf = str(min(3, self.n_brokers))
        common = {
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }
        home = self.workdir / "controller"
        props = {"process.roles": "controller", "node.id": str(CONTROLLER_ID),
                 "listeners": f"CONTROLLER://127.0.0.1:{cport}", **common,
                 "log.dirs": str(home / "data"),
                 "num.partitions": "1", "default.replication.factor": rf,
                 **self._merged("controller")}
        self.controller = Node(CONTROLLER_ID, "controller", cport, home, props)
        for i in range(1, self.n_brokers + 1):
            port = free_port()
            home = self.workdir / f"broker-{i}"
            props = {"process.roles": "broker", "node.id": str(i),
                     "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                     "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                     "inter.broker.listener.name": "PLAINTEXT", **common,
                     "log.dirs": str(home / "data"),
                     "offsets.topic.replication.factor": rf,
                     "transaction.state.log.replication.factor": rf,
                     "transaction.state.log.min.isr": "1",
                     "share.coordinator.state.topic.replication.factor": rf,
                     "share.coordinator.state.topic.min.isr": "1",
                     **self._merged("broker")}
            self.brokers[i] = Node(i, "broker", port, home, props)
        for n in [self.controller, *self.brokers.values()]:
            n.home.mkdir(parents=True, exist_ok=True)
            (n.home / "server.properties").write_text(_props(n.props))

    def _format(self) -> None:
        c = self.controller
        cmd = ["java", *JVM_OPTS, f"-Dlab.log={c.home / 'format.log'}",
               f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
               "-cp", self.classpath, "kafka.tools.StorageTool", "format",
               # "--cluster-id=ID" in one word: a random id may start with "-" (1 in 32), which
               # argparse4j would take for an option
               f"--cluster-id={self.cluster_id}", "-c", str(c.home / "server.properties"), "--standalone"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"StorageTool format failed: {r.stdout}\n{r.stderr}")
        self.event("format", node=CONTROLLER_ID, output=r.stdout.strip().splitlines()[-1:] or "")
        for n in self.brokers.values():     # what `format --no-initial-controllers` writes
            d = n.home / "data"
            d.mkdir(parents=True, exist_ok=True)
            (d / "meta.properties").write_text(
                f"#\n#written by isrflow lab\ndirectory.id={random_uuid()}\n"
                f"node.id={n.id}\nversion=1\ncluster.id={self.cluster_id}\n")

    # -- processes -------------------------------------------------------------------------
    def _launch(self, n: Node) -> None:
        n.starts += 1
        out = open(n.home / "stdout.log", "ab")
        cmd = ["java", *JVM_OPTS, f"-Dlab.log={n.log}",
               f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
               "-cp", self.classpath, "kafka.Kafka", str(n.home / "server.properties")]
        try:
            n.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True,
                                      preexec_fn=_die_with_parent)
        finally:
            out.close()
        _register(n.proc)

    def _log_has(self, n: Node, text: str, from_pos: int = 0) -> bool:
        try:
            with open(n.log, "rb") as f:
                f.seek(from_pos)
                return text.encode() in f.read()
        except FileNotFoundError:
            return False

    def _log_size(self, n: Node) -> int:
        try:
            return n.log.stat().st_size
        except FileNotFoundError:
            return 0

    def wait_started(self, ids=None, timeout: float | None = None, positions: dict | None = None) -> None:
        """Wait until the given brokers (default: all) logged 'Transition from STARTING to
        STARTED' — BrokerServer gets there only after the controller unfenced it."""
        ids = list(self.brokers) if ids is None else list(ids)
        positions = positions or {}
        deadline = time.time() + (timeout or self.start_timeout)
        pending = set(ids)
        while pending:
            for i in list(pending):
                n = self.brokers[i]
                if self._log_has(n, "Transition from STARTING to STARTED", positions.get(i, 0)):
                    pending.discard(i)
                    self.event("broker_started", broker=i)
                elif n.proc is not None and n.proc.poll() is not None:
                    raise RuntimeError(f"broker {i} exited with {n.proc.returncode}; see {n.log}")
            if pending and time.time() > deadline:
                raise TimeoutError(f"brokers {sorted(pending)} not started after {timeout or self.start_timeout}s")
            if pending:
                time.sleep(0.1)

    def __enter__(self) -> "KafkaCluster":
        if threading.current_thread() is threading.main_thread():
            self._old_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _sigterm_to_exit)
        try:
            self._layout()
            self._format()
            self._launch(self.controller)
            self.event("start", node=CONTROLLER_ID, role="controller", pid=self.controller.proc.pid)
            for n in self.brokers.values():
                self._launch(n)
                self.event("start", node=n.id, role="broker", pid=n.proc.pid)
            self.wait_started()
            self.event("cluster_ready", brokers=list(self.brokers))
        except BaseException:
            self.stop()
            self._restore_signal()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self._restore_signal()

    def _restore_signal(self) -> None:
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def node(self, node_id: int) -> Node:
        return self.controller if node_id == CONTROLLER_ID else self.brokers[node_id]

    def pid(self, node_id: int) -> int | None:
        n = self.node(node_id)
        return n.proc.pid if n.running else None

    def kill(self, broker: int, sig: int = signal.SIGKILL, wait: bool | None = None,
             timeout: float = 30.0) -> dict:
        """Send `sig` to a node's process group (broker id, or 100 for the controller).
        SIGKILL waits for the exit; SIGTERM waits when wait=True (controlled shutdown);
        SIGSTOP / SIGCONT never wait."""
        n = self.node(broker)
        if not n.running:
            raise RuntimeError(f"node {broker} is not running")
        name = signal.Signals(sig).name
        _kill_group(n.proc, sig)
        e = self.event("signal", node=broker, signal=name)
        if wait is None:
            wait = sig == signal.SIGKILL
        if wait:
            try:
                n.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(n.proc, signal.SIGKILL)
                n.proc.wait(timeout=10)
                self.event("signal", node=broker, signal="SIGKILL", reason=f"{name} timeout")
            self.event("exited", node=broker, returncode=n.proc.returncode)
        return e

    def start(self, broker: int, wait: bool = True, timeout: float | None = None) -> None:
        """(Re)start a stopped node; for a broker wait until it is started (unfenced)."""
        n = self.node(broker)
        if n.running:
            raise RuntimeError(f"node {broker} is already running")
        pos = self._log_size(n)
        self._launch(n)
        self.event("start", node=broker, role=n.role, pid=n.proc.pid, restart=n.starts > 1)
        if wait and n.role == "broker":
            self.wait_started([broker], timeout=timeout, positions={broker: pos})

    def stop(self, timeout: float = 20.0) -> None:
        """Controlled shutdown of every broker (SIGTERM, together), then the controller;
        SIGKILL whatever has not exited in time. Idempotent."""
        for d in list(self._drivers):
            d.close()
        brokers = [n for n in self.brokers.values() if n.running]
        for n in brokers:
            _kill_group(n.proc, signal.SIGCONT)      # a SIGSTOPped JVM would never see SIGTERM
            _kill_group(n.proc, signal.SIGTERM)
        if brokers:
            self.event("stop", nodes=[n.id for n in brokers], signal="SIGTERM")
        self._reap(brokers, timeout)
        c = self.controller
        if c is not None and c.running:
            _kill_group(c.proc, signal.SIGCONT)
            _kill_group(c.proc, signal.SIGTERM)
            self.event("stop", nodes=[CONTROLLER_ID], signal="SIGTERM")
            self._reap([c], timeout)
        for n in [c, *self.brokers.values()]:
            if n is not None and n.proc is not None:
                _kill_group(n.proc, signal.SIGKILL)   # stragglers in the group, if any
                with _LIVE_LOCK:
                    _LIVE.discard(n.proc)

    def _reap(self, nodes: list[Node], timeout: float) -> None:
        deadline = time.time() + timeout
        for n in nodes:
            try:
                n.proc.wait(timeout=max(0.1, deadline - time.time()))
                self.event("exited", node=n.id, returncode=n.proc.returncode)
            except subprocess.TimeoutExpired:
                _kill_group(n.proc, signal.SIGKILL)
                n.proc.wait(timeout=10)
                self.event("exited", node=n.id, returncode=n.proc.returncode, forced=True)

    def all_pids(self) -> list[int]:
        ps = [n.proc.pid for n in [self.controller, *self.brokers.values()] if n and n.proc]
        return ps + [d.proc.pid for d in self._drivers if d.proc is not None]

    # -- the Java driver -----------------------------------------------------------------
    def driver(self, acks_file) -> "Driver":
        d = Driver(self.bootstrap_servers, acks_file, self.workdir / "driver.log")
        self._drivers.append(d)
        return d

    def collect_metadata(self, dest) -> list[str]:
        """Copy the controller's metadata log (segments, snapshots, quorum-state; not the
        preallocated indexes) into `dest`. Call after stop()."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        names = []
        for f in sorted(self.metadata_dir.iterdir()):
            if f.suffix in (".log", ".checkpoint") or f.name == "quorum-state":
                shutil.copyfile(f, dest / f.name)     # snapshots are 0400 in Kafka's dir
                os.chmod(dest / f.name, 0o644)
                names.append(f.name)
        return names


def _sigterm_to_exit(signum, frame):
    raise SystemExit(128 + signum)


# -- the Java driver (java/lab/LabDriver.java) ----------------------------------------------
CLASSES = ROOT / ".cache" / "lab-classes"
DRIVER_SRC = ROOT / "java" / "lab" / "LabDriver.java"


def compile_driver(force: bool = False) -> Path:
    """javac the driver into .cache/lab-classes when missing or older than its source."""
    cls = CLASSES / "LabDriver.class"
    if force or not cls.exists() or cls.stat().st_mtime < DRIVER_SRC.stat().st_mtime:
        cp = kafka_classpath()
        if cp is None:
            raise RuntimeError("Kafka JARs not found: run ./dev setup")
        CLASSES.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["javac", "-nowarn", "-d", str(CLASSES), "-cp", cp, str(DRIVER_SRC)],
                           capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            raise RuntimeError(f"javac LabDriver failed:\n{r.stderr}")
    return CLASSES


class DriverError(RuntimeError):
    pass


class Driver:
    """The long-running LabDriver JVM: `call("describe t")` -> dict (raises DriverError)."""

    def __init__(self, bootstrap: str, acks_file, log_file):
        classes = compile_driver()
        cp = f"{classes}:{kafka_classpath()}"
        self.log = open(log_file, "ab")
        cmd = ["java", *JVM_OPTS, "-Xmx256m", f"-Dlab.log={log_file}",
               f"-Dlog4j2.configurationFile={Path(log_file).parent / 'log4j2.properties'}",
               "-cp", cp, "LabDriver", bootstrap, str(acks_file)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        _register(self.proc)
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self._read(60)          # {"ok": true, "ready": true}

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._q.put(line)
        self._q.put(None)

    def _read(self, timeout: float) -> dict:
        try:
            line = self._q.get(timeout=timeout)
        except queue.Empty:
            raise DriverError(f"driver: no reply within {timeout}s")
        if line is None:
            raise DriverError("driver exited")
        return json.loads(line)

    # a read-only command may take READ_ATTEMPTS (3) admin deadlines of 20 s (java/lab/LabDriver.java)
    def call(self, command: str, timeout: float = 90.0, check: bool = True) -> dict:
        self.proc.stdin.write((command + "\n").encode())
        self.proc.stdin.flush()
        r = self._read(timeout)
        if check and not r.get("ok"):
            raise DriverError(f"{command}: {r.get('error')}")
        return r

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("quit", timeout=20, check=False)
            except (DriverError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            _kill_group(self.proc, signal.SIGKILL)
            self.proc.wait(timeout=10)
        with _LIVE_LOCK:
            _LIVE.discard(self.proc)
        self.log.close()
