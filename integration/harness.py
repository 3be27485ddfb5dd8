"""Helpers of the integration tests: wheel, fresh venv, standalone cluster, spark-submit.

The fixtures that use them are in ``conftest.py``; what each one guarantees is
described there. Everything here stays on 127.0.0.1, bounds every wait, and finds
the processes it started by pid (``processes_under``), never by name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("integration")

REPO = Path(__file__).resolve().parents[1]
JOBS = Path(__file__).resolve().parent / "jobs"
PY_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
HEAVY_DEPS = ["pyspark==4.3.*", "pyarrow>=18,<23", "obstore>=0.12"]
"""Cached per machine and hard-linked into each fresh venv (see module docstring)."""
LOOPBACK = "127.0.0.1"
SETUP_TIMEOUT_S = 600


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def run(cmd: list[str], *, timeout: float = SETUP_TIMEOUT_S, **kw: object) -> str:
    """Run a command to completion; on failure raise with its output."""
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise RuntimeError(
            f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    log.info("ran %s in %.1fs", " ".join(map(str, cmd[:4])), time.monotonic() - t0)
    return str(proc.stdout)


def tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError as e:
        return f"<{path}: {e.strerror}>"


# -- processes -----------------------------------------------------------------------


def processes_under(root: Path) -> list[int]:
    """Pids (not ours) whose command line or working directory is inside ``root``."""
    needle = str(root)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(os.path.join(entry.path, "cwd"))
        except OSError:
            continue
        if needle in cmdline or cwd.startswith(needle):
            found.append(int(entry.name))
    return found


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Wait (bounded) until none of ``pids`` exists; returns the survivors."""
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _exists(p)]
        if alive:
            time.sleep(0.1)
    return alive


def _exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def listening_addresses(pids: list[int]) -> list[str]:
    """``ip:port`` of every listening TCP socket owned by ``pids`` (from /proc)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] != "0A" or parts[9] not in inodes:  # 0A = LISTEN
                continue
            hex_ip, hex_port = parts[1].split(":")
            out.append(f"{_decode_ip(hex_ip, v6)}:{int(hex_port, 16)}")
    return out


def _decode_ip(hex_ip: str, v6: bool) -> str:
    raw = bytes.fromhex(hex_ip)
    if not v6:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


@contextlib.contextmanager
def moto_s3() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 (a free port) for the duration; yields its URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address=LOOPBACK, port=port, verbose=False)
    server.start()
    try:
        yield f"http://{LOOPBACK}:{port}"
    finally:
        server.stop()


# -- wheel and venv ------------------------------------------------------------------


def build_wheel(out: Path) -> Path:
    """``pip wheel --no-deps`` of the checkout into ``out``; returns the wheel."""
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        cwd=out.parent,
    )
    wheels = sorted(out.glob("quiver_spark-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {out}, found {wheels}"
    return wheels[0]


@dataclass
class FreshVenv:
    """A virtualenv with the quiver-spark wheel installed; nothing from the checkout."""

    root: Path
    scratch: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.root / "lib" / f"python{PY_VERSION}" / "site-packages"

    @property
    def spark_home(self) -> Path:
        return self.site_packages / "pyspark"

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment for its processes: no PYTHONPATH, its bin first on PATH."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")
            and not k.startswith(("SPARK_", "PYSPARK_"))
        }
        env.update(
            PATH=f"{self.root / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
            VIRTUAL_ENV=str(self.root),
            SPARK_HOME=str(self.spark_home),
            PYSPARK_PYTHON=str(self.python),
            PYSPARK_DRIVER_PYTHON=str(self.python),
            SPARK_LOCAL_IP=LOOPBACK,
            TMPDIR=str(self.scratch),
        )
        env.update(extra)
        return env

    def quiver(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Run the wheel's ``quiver`` console script; returns its stdout."""
        cmd = [str(self.root / "bin" / "quiver"), *args]
        return run(cmd, cwd=self.scratch, env=self.env(**(env or {})))

    def python_eval(self, code: str) -> str:
        return run([str(self.python), "-c", code], cwd=self.scratch, env=self.env()).strip()


def _cache_dir() -> Path:
    default = Path.home() / ".cache" / "quiver-spark" / "integration"
    return Path(os.environ.get("QUIVER_INTEGRATION_CACHE", default))


def _base_python() -> str:
    return str(getattr(sys, "_base_executable", sys.executable))


def _pip_into(python: Path, *args: str, cwd: Path) -> None:
    # without PYTHONPATH: a checkout on it (its egg-info) reads as "already installed"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args],
        cwd=cwd, env=env)  # fmt: skip


def _heavy_deps_venv(scratch: Path) -> Path:
    """The cached venv holding HEAVY_DEPS, built by pip once per machine and spec set."""
    key = hashlib.sha256(json.dumps([PY_VERSION, *HEAVY_DEPS]).encode()).hexdigest()[:16]
    final = _cache_dir() / f"deps-{key}"
    if (final / "READY").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    building = final.parent / f".building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    run([_base_python(), "-m", "venv", "--without-pip", str(building)], cwd=scratch)
    _pip_into(building / "bin" / "python", *HEAVY_DEPS, cwd=scratch)
    (building / "READY").write_text(json.dumps(HEAVY_DEPS))
    try:
        building.rename(final)
    except OSError:  # another session built it meanwhile
        shutil.rmtree(building, ignore_errors=True)
    return final


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link every file of ``src`` into ``dst`` (new directories, shared file data).

    Byte code caches come along: they stay valid (same source mtime and size), and
    without them every Python worker recompiles pyarrow at start.
    """
    for dirpath, _dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            target = dst / rel / name
            if not target.exists():
                os.link(Path(dirpath) / name, target)


def copy_checkout(dst: Path) -> Path:
    """What a user clones into ``dst``: the checkout's tracked files as they are now."""
    files = run(["git", "ls-files", "-z"], cwd=REPO).split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dst / name)
    return dst


OWN_INSTALL = re.compile(
    r"(__editable__.*quiver_spark.*|quiver_spark-.*\.dist-info|quiver-spark-checkout\.pth)$"
)
"""Top-level entries of a site-packages that are this project's own install."""


def link_dependencies(dst: Path) -> None:
    """Hard-link the running environment's site-packages into ``dst``, except this
    project's own install: pip then finds every dependency installed and installs only
    the project, so what a test measures is that install, not the download of every
    dependency (building the test environment itself did that)."""
    src = Path(sysconfig.get_path("purelib"))
    for entry in src.iterdir():
        if OWN_INSTALL.match(entry.name):
            continue
        if entry.is_dir():
            _link_tree(entry, dst / entry.name)
        elif not (dst / entry.name).exists():
            os.link(entry, dst / entry.name)


def build_fresh_venv(root: Path, wheel: Path) -> tuple[FreshVenv, str]:
    """A new venv under ``root`` with ``wheel`` installed by pip; returns it and how."""
    scratch = root / "scratch"
    scratch.mkdir()
    venv = FreshVenv(root / "venv", scratch)
    run([_base_python(), "-m", "venv", "--without-pip", str(venv.root)], cwd=scratch)
    if os.environ.get("QUIVER_INTEGRATION_NO_CACHE"):
        _pip_into(venv.python, *HEAVY_DEPS, cwd=scratch)
        how = "pip (no cache)"
    else:
        base = _heavy_deps_venv(scratch)
        base_site = base / "lib" / f"python{PY_VERSION}" / "site-packages"
        _link_tree(base_site, venv.site_packages)
        how = f"hard links from {base}"
    _pip_into(venv.python, str(wheel), cwd=scratch)
    where = json.loads(
        venv.python_eval(
            "import json, quiver_spark, pyspark_quiver, pyspark, sys;"
            "print(json.dumps([quiver_spark.__file__, pyspark_quiver.__file__, pyspark.__version__,"
            " sys.path]))"
        )
    )
    for module_file in where[:2]:
        assert module_file.startswith(str(venv.site_packages)), (
            f"fresh venv imports {module_file}, not its installed wheel"
        )
    assert not any(p.startswith(str(REPO)) for p in where[3]), f"checkout on sys.path: {where[3]}"
    assert where[2].startswith("4.3."), where[2]
    assert (venv.spark_home / "sbin" / "spark-daemon.sh").exists()
    return venv, how


# -- the standalone cluster ----------------------------------------------------------

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.master.name = org.apache.spark.deploy
logger.master.level = info
"""


@dataclass
class StandaloneCluster:
    """One master and ``workers`` workers of one core each, all on 127.0.0.1.

    With ``isolated_workers`` each worker is a :class:`Machine` (``w1``, ``w2``, ...;
    :meth:`lose_machine`, :meth:`start_machine` for a replacement): the worker JVM runs
    in the foreground (``spark-class``, not ``spark-daemon.sh``, whose ``nohup``
    would leave the namespace's process tree) inside ``unshare``, and its executors
    inherit its environment: ``SPARK_WORKER_DIR``, ``SPARK_LOCAL_DIRS`` (which replaces
    an application's ``spark.local.dir`` on the executors), ``XDG_CACHE_HOME`` and
    ``TMPDIR`` all on the machine's private disk.
    """

    venv: FreshVenv
    root: Path
    workers: int = 2
    master_port: int = 0
    webui_port: int = 0
    worker_ports: list[int] = field(default_factory=list)
    started: list[tuple[str, int]] = field(default_factory=list)
    isolated_workers: bool = False
    """Each worker a machine of its own (:class:`Machine`): its own mount and UTS
    namespace, host name ``w<N>``, and a private tmpfs at :attr:`machine_dir` holding
    its work dir, Spark local dirs, ``XDG_CACHE_HOME`` and ``TMPDIR``."""
    machines: dict[str, Machine] = field(default_factory=dict)
    """The isolated workers started so far, by host name (lost ones included)."""

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def machine_dir(self) -> Path:
        """Where each isolated worker mounts its private disk: the same path on every
        machine (as a cluster's hosts share one configuration); empty on the host."""
        return self.root / "machine"

    @property
    def work_dir(self) -> Path:
        return self.machine_dir / "work" if self.isolated_workers else self.root / "work"

    @property
    def conf_dir(self) -> Path:
        return self.root / "conf"

    def env(self) -> dict[str, str]:
        return self.venv.env(
            SPARK_CONF_DIR=str(self.conf_dir),
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_PID_DIR=str(self.root / "pids"),
            SPARK_WORKER_DIR=str(self.work_dir),
            SPARK_LOCAL_DIRS=str(self.root / "local"),
            SPARK_IDENT_STRING="quiver-it",
            SPARK_DAEMON_MEMORY="512m",
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        )

    def _daemon(self, action: str, cls: str, instance: int, *args: str) -> None:
        script = self.venv.spark_home / "sbin" / "spark-daemon.sh"
        cmd = ["bash", str(script), action, cls, str(instance), *args]
        run(cmd, cwd=self.root, env=self.env(), timeout=120)

    def start(self) -> None:
        for d in ("conf", "logs", "pids", "work", "local"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "log4j2.properties").write_text(LOG4J2)
        (self.conf_dir / "spark-env.sh").write_text(f"SPARK_LOCAL_IP={LOOPBACK}\n")
        self.master_port, self.webui_port = free_port(), free_port()
        self.started.append((MASTER_CLASS, 1))
        self._daemon("start", MASTER_CLASS, 1, "--host", LOOPBACK, "--port", str(self.master_port),
                     "--webui-port", str(self.webui_port))  # fmt: skip
        self._wait_port(self.master_port, "master RPC port", 120)
        if self.isolated_workers:
            self.machine_dir.mkdir(exist_ok=True)
            for n in range(1, self.workers + 1):
                self.start_machine(f"w{n}")
            self.wait_alive(self.workers)
            return
        for n in range(1, self.workers + 1):  # workers retry registering until it is ALIVE
            port, ui = free_port(), free_port()
            self.worker_ports.append(port)
            self.started.append((WORKER_CLASS, n))
            self._daemon("start", WORKER_CLASS, n, "--host", LOOPBACK, "--port", str(port),
                         "--webui-port", str(ui), "--cores", "1", "--memory", "2g",
                         "--work-dir", str(self.work_dir / f"worker-{n}"),
                         self.master_url)  # fmt: skip
        self.wait_for(
            lambda s: (
                s.get("status") == "ALIVE"
                and sum(w.get("state") == "ALIVE" for w in s.get("workers", [])) >= self.workers
            ),
            f"master and {self.workers} workers ALIVE",
            180,
        )

    def _wait_port(self, port: int, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(1)
                if s.connect_ex((LOOPBACK, port)) == 0:
                    return
            time.sleep(0.3)
        raise AssertionError(f"cluster: no {what} within {timeout_s}s\n" + self.logs_tail())

    def state(self) -> dict:
        """The master's JSON status (workers, active and completed apps)."""
        url = f"http://{LOOPBACK}:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as r:
            return dict(json.load(r))

    def wait_for(self, ok: Callable[[dict], bool], what: str, timeout_s: float) -> dict:
        """Poll the master's status until ``ok(status)``; fail with the daemons' logs."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                st = self.state()
                if ok(st):
                    return st
                last = st
            except OSError as e:
                last = e
            time.sleep(0.5)
        raise AssertionError(
            f"cluster: no {what} within {timeout_s}s; last state {last}\n" + self.logs_tail()
        )

    def executor_pids(self) -> list[int]:
        """Pids of live CoarseGrainedExecutorBackend JVMs launched by this cluster's workers."""
        out = []
        for pid in processes_under(self.work_dir):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "CoarseGrainedExecutorBackend" in cmd and _exists(pid) and _worker_child(pid):
                out.append(pid)
        return sorted(out)

    def logs_tail(self, n: int = 30) -> str:
        parts = []
        for f in sorted((self.root / "logs").glob("*.out")):
            parts.append(f"--- {f.name}\n{tail(f, n)}")
        return "\n".join(parts)

    def stop(self) -> list[int]:
        """Stop the daemons, then kill whatever of this cluster still runs; returns leftovers."""
        for machine in self.machines.values():  # a machine's processes go at once
            machine.lose()
        for cls, n in reversed(self.started):
            try:
                self._daemon("stop", cls, n)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log.warning("spark-daemon stop %s %d failed: %s", cls, n, e)
        self.started.clear()
        leftovers = processes_under(self.root.parent)
        kill_pids(leftovers)
        return wait_gone(leftovers, 20)

    # -- isolated workers ----------------------------------------------------------
    def alive_workers(self, st: dict) -> int:
        return sum(w.get("state") == "ALIVE" for w in st.get("workers", []))

    def wait_alive(self, n: int, timeout_s: float = 180) -> dict:
        """Wait until the master is ALIVE with exactly ``n`` ALIVE workers."""
        return self.wait_for(
            lambda s: s.get("status") == "ALIVE" and self.alive_workers(s) == n,
            f"master and {n} workers ALIVE",
            timeout_s,
        )

    def start_machine(self, name: str) -> Machine:
        """Start a worker as machine ``name`` (see :class:`Machine`); returns at once
        (the worker registers with the master by itself: :meth:`wait_alive`)."""
        assert self.isolated_workers, "machines are the workers of an isolated cluster"
        assert name not in self.machines, f"machine {name} was started before"
        port, ui = free_port(), free_port()
        self.worker_ports.append(port)
        m = self.machine_dir
        env = self.env()
        env.update(
            SPARK_WORKER_DIR=str(m / "work"),
            SPARK_LOCAL_DIRS=str(m / "local"),
            XDG_CACHE_HOME=str(m / "cache"),
            TMPDIR=str(m / "tmp"),
            SPARK_DAEMON_JAVA_OPTS=f"-Djava.io.tmpdir={m / 'tmp'} -XX:-UsePerfData",
        )
        worker = [str(self.venv.spark_home / "bin" / "spark-class"), WORKER_CLASS,
                  "--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui),
                  "--cores", "1", "--memory", "2g", "--work-dir", str(m / "work"),
                  self.master_url]  # fmt: skip
        cmd = [*machine_command(name, m), *worker]
        log_file = self.root / "logs" / f"machine-{name}.out"
        with open(log_file, "ab") as out:
            out.write(("$ " + " ".join(cmd) + "\n").encode())
            out.flush()
            proc = subprocess.Popen(
                cmd, cwd=self.root, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        machine = Machine(name, proc, m, port, log_file)
        self.machines[name] = machine
        machine.wait_started(60)
        log.info("machine %s: worker port %d, namespace %s", name, port, machine.mnt_ns)
        return machine

    def lose_machine(self, name: str) -> list[int]:
        """Machine ``name`` is lost: every process of it (worker, executors, Python
        workers) killed by SIGKILL at once, and its private disk gone with its mount
        namespace. Returns the pids killed."""
        return self.machines[name].lose()


def jobs_copy(dest: Path) -> Path:
    """The job scripts copied away from the checkout (their directory lands on sys.path)."""
    shutil.copytree(JOBS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


# -- drivers -------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc ppid links)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


@dataclass
class SparkSubmit:
    """One ``spark-submit`` (client mode) of a job script from the fresh venv."""

    venv: FreshVenv
    root: Path
    master: str
    script: Path
    args: list[str]
    conf: dict[str, str] = field(default_factory=dict)
    env_extra: dict[str, str] = field(default_factory=dict)
    attempts: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def base_conf(self) -> dict[str, str]:
        local = self.root / "spark-local"
        local.mkdir(parents=True, exist_ok=True)
        return {
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.ui.enabled": "false",
            "spark.driver.memory": "768m",
            "spark.executor.memory": "768m",
            "spark.executor.cores": "1",
            "spark.cores.max": "2",
            "spark.task.maxFailures": "8",
            "spark.local.dir": str(local),
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stopTimeout": "60s",
            "spark.pyspark.python": str(self.venv.python),
            "spark.pyspark.driver.python": str(self.venv.python),
            "spark.python.worker.faulthandler.enabled": "true",
        }

    def log_path(self, attempt: int | None = None) -> Path:
        return self.root / f"driver-{attempt or self.attempts}.log"

    def start(self) -> subprocess.Popen[bytes]:
        assert self.proc is None or self.proc.poll() is not None, "driver still running"
        self.attempts += 1
        conf = {**self.base_conf(), **self.conf}
        cmd = [
            str(self.venv.spark_home / "bin" / "spark-submit"),
            "--master",
            self.master,
            "--deploy-mode",
            "client",
        ]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        cmd += [str(self.script), *self.args]
        with open(self.log_path(), "wb") as out:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.root,
                env=self.venv.env(**self.env_extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self.proc

    def kill9(self) -> list[int]:
        """SIGKILL the driver JVM and every process below it at once; returns their pids."""
        assert self.proc is not None
        victims = descendants(self.proc.pid)
        kill_pids(victims)
        self.proc.wait(timeout=30)
        survivors = wait_gone(victims, 20)
        assert not survivors, f"driver processes survived kill -9: {survivors}"
        return victims

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(
                f"driver did not exit within {timeout_s}s\n{self.log_tail()}"
            ) from None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 80) -> str:
        return f"--- {self.log_path()}\n{tail(self.log_path(), n)}"

    def stop(self) -> None:
        if self.running():
            self.kill9()


# -- a packed environment shipped with --archives (docs/cluster.md) --------------------

ENV_ALIAS = "environment"
"""Directory name the archive unpacks to on every executor (``--archives X#environment``)."""
ENV_PYTHON = f"./{ENV_ALIAS}/bin/python"
"""``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON``: relative, so each process resolves it
in its own working directory (an executor's holds the unpacked archive)."""


def build_packed_env(root: Path, wheel: Path) -> Path:
    """The archive of docs/cluster.md: ``python -m venv --copies``, the wheel installed
    by pip, ``tar -czf`` of the venv's contents. Returns ``root/quiver_env.tar.gz``."""
    root.mkdir(parents=True, exist_ok=True)
    env = root / "quiver_env"
    run([_base_python(), "-m", "venv", "--copies", str(env)], cwd=root)
    run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=root)
    archive = root / "quiver_env.tar.gz"
    run(["tar", "-czf", str(archive), "-C", str(env), "."], cwd=root)
    return archive


def unpack_env(archive: Path, cwd: Path) -> Path:
    """The archive unpacked as ``cwd/environment``: the client-mode driver's copy."""
    dest = cwd / ENV_ALIAS
    if not (dest / "bin" / "python").exists():
        dest.mkdir(parents=True, exist_ok=True)
        run(["tar", "-xzf", str(archive), "-C", str(dest)], cwd=cwd)
    return dest


def without_venv(env: dict[str, str], venv: FreshVenv) -> dict[str, str]:
    """``env`` with no trace of ``venv`` but its Spark installation (``SPARK_HOME``):
    no ``VIRTUAL_ENV``, no ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON``, not on PATH."""
    out = {k: v for k, v in env.items()
           if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}  # fmt: skip
    out["PATH"] = ":".join(
        p for p in env.get("PATH", "").split(":") if not p.startswith(str(venv.root))
    )
    return out


@dataclass
class BareStandaloneCluster(StandaloneCluster):
    """A standalone cluster whose daemons, and so executors, have no Python environment:
    Spark only (the venv's ``pyspark`` as ``SPARK_HOME``), no ``PYSPARK_PYTHON``, no
    virtualenv on PATH. Python packages reach executors only through ``--archives``."""

    def env(self) -> dict[str, str]:
        return without_venv(super().env(), self.venv)


@dataclass
class ArchiveSparkSubmit(SparkSubmit):
    """``spark-submit`` in the form docs/cluster.md gives (client mode):

    ``PYSPARK_PYTHON=./environment/bin/python PYSPARK_DRIVER_PYTHON=./environment/bin/python
    spark-submit --master URL --deploy-mode client --archives quiver_env.tar.gz#environment
    --conf ... app.py ARGS``, run from a directory holding the same archive unpacked as
    ``environment`` (the driver's Python). Nothing else of a Python environment is set.
    """

    archive: Path | None = None

    @classmethod
    def replacing(cls, submit: SparkSubmit, archive: Path) -> ArchiveSparkSubmit:
        return cls(submit.venv, submit.root, submit.master, submit.script, list(submit.args),
                   dict(submit.conf), dict(submit.env_extra), archive=archive)  # fmt: skip

    def base_conf(self) -> dict[str, str]:
        conf = super().base_conf()
        conf.pop("spark.pyspark.python")
        conf.pop("spark.pyspark.driver.python")
        return conf

    def command(self) -> tuple[dict[str, str], list[str]]:
        """``(environment variables set, argv)`` of the submission."""
        assert self.archive is not None
        env = {"PYSPARK_PYTHON": ENV_PYTHON, "PYSPARK_DRIVER_PYTHON": ENV_PYTHON}
        cmd = [str(self.venv.spark_home / "bin" / "spark-submit"),
               "--master", self.master, "--deploy-mode", "client",
               "--archives", f"{self.archive}#{ENV_ALIAS}"]  # fmt: skip
        for k, v in {**self.base_conf(), **self.conf}.items():
            cmd += ["--conf", f"{k}={v}"]
        return env, [*cmd, str(self.script), *self.args]

    def start(self) -> subprocess.Popen[bytes]:
        assert self.proc is None or self.proc.poll() is not None, "driver still running"
        assert self.archive is not None
        unpack_env(self.archive, self.root)
        self.attempts += 1
        env_vars, cmd = self.command()
        env = {**without_venv(self.venv.env(**self.env_extra), self.venv), **env_vars}
        with open(self.log_path(), "wb") as out:
            out.write((" ".join(f"{k}={v}" for k, v in env_vars.items()) + " "
                       + " ".join(cmd) + "\n").encode())  # fmt: skip
            out.flush()
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.root,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self.proc


def python_executables(root: Path) -> set[str]:
    """``argv[0]`` of every PySpark Python worker process running under ``root``."""
    found = set()
    for pid in processes_under(root):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = b" ".join(argv).decode(errors="replace")
        if "pyspark.daemon" in text or "pyspark.worker" in text:
            found.add(argv[0].decode(errors="replace"))
    return found


def _worker_child(pid: int) -> bool:
    """True when ``pid``'s parent is a standalone Worker JVM: an executor a worker runs
    (and relaunches when it dies), not another process whose cwd happens to be here."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parent = Path(f"/proc/{ppid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return False
    return "org.apache.spark.deploy.worker.Worker" in parent


# -- machines: isolated workers ------------------------------------------------------

MACHINE_SETUP = """\
set -eu
hostname "$1"
mount -t tmpfs -o size=2g,mode=0755 "quiver-$1" "$2"
mkdir -p "$2/work" "$2/local" "$2/cache" "$2/tmp"
shift 2
exec "$@"
"""
"""Run as root inside the new namespaces: host name, private disk, then the worker."""


def machine_command(name: str, disk: Path) -> list[str]:
    """``argv`` prefix running a command as machine ``name``: in a new mount and UTS
    namespace (``unshare --mount --uts --propagation private --fork --kill-child``), with
    host name ``name`` and a tmpfs mounted at ``disk`` (invisible outside it, and gone
    with the namespace's last process)."""
    return ["unshare", "--mount", "--uts", "--propagation", "private", "--fork",
            "--kill-child=SIGKILL", "--", "/bin/sh", "-c", MACHINE_SETUP,
            "machine-setup", name, str(disk)]  # fmt: skip


def namespace_of(pid: int, kind: str = "mnt") -> str | None:
    """``mnt:[4026532177]``-style identity of ``pid``'s namespace (None once it is gone)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def pids_in_namespace(ns: str, kind: str = "mnt") -> list[int]:
    """Every live process whose ``kind`` namespace is ``ns``."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and namespace_of(int(entry.name), kind) == ns:
            if _exists(int(entry.name)):
                out.append(int(entry.name))
    return sorted(out)


@dataclass
class Machine:
    """A standalone worker as a machine of its own on loopback.

    Its processes (the worker JVM, the executors it launches, their Python workers)
    share a mount and a UTS namespace of their own: host name ``name``, and a tmpfs at
    ``disk`` that only they see (work dir, Spark local dirs, ``XDG_CACHE_HOME``,
    ``TMPDIR``). Nothing else they write is shared with another machine; the network
    (127.0.0.1: master, driver, the object store) is. ``proc`` is the ``unshare``
    process in the host's namespaces; the machine is found by its namespace.
    """

    name: str
    proc: subprocess.Popen[bytes]
    disk: Path
    port: int
    log_file: Path
    mnt_ns: str | None = None
    uts_ns: str | None = None
    lost: bool = False

    def wait_started(self, timeout_s: float) -> None:
        """Wait until the machine's first process runs in its own namespaces."""
        host_ns = namespace_of(os.getpid())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for pid in descendants(self.proc.pid)[1:]:
                ns = namespace_of(pid)
                if ns is not None and ns != host_ns:
                    self.mnt_ns, self.uts_ns = ns, namespace_of(pid, "uts")
                    if self.hostname() == self.name:
                        return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(
            f"machine {self.name}: no process in its own namespace within {timeout_s}s "
            f"(unshare exit {self.proc.poll()})\n{tail(self.log_file)}"
        )

    def pids(self) -> list[int]:
        """Every live process of this machine."""
        return pids_in_namespace(self.mnt_ns) if self.mnt_ns and not self.lost else []

    def hostname(self) -> str | None:
        """The host name its processes see (from one of them)."""
        for pid in pids_in_namespace(self.mnt_ns) if self.mnt_ns else []:
            got = subprocess.run(["nsenter", "--target", str(pid), "--uts", "hostname"],
                                 capture_output=True, text=True, timeout=10)  # fmt: skip
            if got.returncode == 0:
                return got.stdout.strip()
        return None

    def path(self, inside: Path) -> Path:
        """``inside`` (a path as this machine's processes see it) seen from the host
        through one of its processes' root (``/proc/<pid>/root``): for inspection only."""
        for pid in self.pids():
            root = Path(f"/proc/{pid}/root")
            if root.exists():
                return root / inside.relative_to("/")
        raise AssertionError(f"machine {self.name} has no live process")

    def files(self, under: Path | None = None) -> list[Path]:
        """Every file on this machine's disk (or under ``under`` on it), as the machine
        names them."""
        top = under if under is not None else self.disk
        seen = self.path(top)
        if not seen.exists():
            return []
        return sorted(top / p.relative_to(seen) for p in seen.rglob("*") if p.is_file())

    def lose(self) -> list[int]:
        """SIGKILL every process of the machine at once; returns their pids."""
        if self.lost:
            return []
        victims = self.pids()
        kill_pids(victims)
        self.lost = True
        survivors = wait_gone(victims, 30)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        leftover = pids_in_namespace(self.mnt_ns) if self.mnt_ns else []
        assert not survivors and not leftover, (
            f"machine {self.name}: processes survived kill -9: {survivors or leftover}"
        )
        return victims
