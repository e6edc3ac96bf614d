"""Fixtures for the real-client tests: the infergate-backend binary on free ports over a generated model
repository, and (for the differential test) a real Triton serving the same models.

Run through `make test` (it exports INFERGATE_BIN_DIR and INFERGATE_PYTHON)."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402

VENV_PYTHON = os.path.expanduser("~/.cache/infergate/venv/bin/python")
TOOLS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "shared", "tools"))


def backend_binary():
    bin_dir = os.environ.get("INFERGATE_BIN_DIR")
    if not bin_dir:
        pytest.fail("INFERGATE_BIN_DIR is not set: run these tests through `make test` (or `make test-python`)")
    exe = os.path.join(bin_dir, "infergate-backend")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} is missing: build it with `make build` (or run `make test`)")
    return exe


def client_python():
    """The venv's python, for the subprocesses that import the kserve SDK."""
    py = os.environ.get("INFERGATE_PYTHON") or VENV_PYTHON
    if not os.access(py, os.X_OK):
        pytest.fail(f"{py} is missing: create the venv with `make venv` (or run `make test`)")
    return py


def tool(name):
    path = os.environ.get("INFERGATE_SHARED_TOOLS", TOOLS)
    exe = os.path.join(path, name)
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} is missing: the shared tools folder (../shared/tools beside the checkout) is needed")
    return exe


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_ready(url, proc, log_path, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log_path) as f:
                pytest.fail(f"server exited with {proc.returncode} during start-up:\n{f.read()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    with open(log_path) as f:
        pytest.fail(f"server not ready at {url} after {timeout} s:\n{f.read()[-4000:]}")


class Server:
    """A started server process; `http`, `grpc` and `metrics` are host:port strings."""

    def __init__(self, argv, ports, log_path, ready_timeout, env=None):
        self.http_port, self.grpc_port, self.metrics_port = ports
        self.http = f"localhost:{self.http_port}"
        self.grpc = f"localhost:{self.grpc_port}"
        self.metrics = f"localhost:{self.metrics_port}"
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_ready(f"http://{self.http}/v2/health/ready", self.proc, log_path, ready_timeout)

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def start_backend(repo, log_path, extra=()):
    ports = free_ports(3)
    argv = [
        backend_binary(),
        "--model-repository", str(repo),
        "--http-port", str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2]),
        "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
        *extra,
    ]
    return Server(argv, ports, log_path, ready_timeout=60)


@pytest.fixture(scope="session")
def onnx_repo(tmp_path_factory):
    return models.write_onnx_repository(str(tmp_path_factory.mktemp("onnx_repo")))


@pytest.fixture(scope="session")
def backend(onnx_repo, tmp_path_factory):
    """infergate-backend in explicit mode with every model loaded (so repository tests can unload)."""
    log = tmp_path_factory.mktemp("logs") / "backend.log"
    server = start_backend(onnx_repo, log, ["--model-control-mode", "explicit", "--load-model", "*"])
    yield server
    code = server.stop()
    assert code == 0, f"infergate-backend exited with {code} on SIGTERM; log: {log}"


@pytest.fixture(scope="session")
def triton(tmp_path_factory):
    """A real Triton 2.51 (Python backend) serving the same models (installed by the tool on first use)."""
    repo = models.write_python_backend_repository(str(tmp_path_factory.mktemp("triton_repo")))
    log = tmp_path_factory.mktemp("logs") / "triton.log"
    ports = free_ports(3)
    argv = [tool("triton-peer"), "serve", repo, *map(str, ports)]
    server = Server(argv, ports, str(log), ready_timeout=240)
    yield server
    server.stop()
