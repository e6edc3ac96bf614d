"""The kserve SDK's REST (v2) and gRPC clients against infergate, in a subprocess of their own."""

import os
import subprocess

from conftest import client_python


def test_kserve_rest_and_grpc_clients(backend):
    script = os.path.join(os.path.dirname(__file__), "kserve_clients.py")
    r = subprocess.run([client_python(), script, backend.http, backend.grpc],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"kserve checks failed:\n{r.stdout}\n{r.stderr[-4000:]}"
    assert "kserve checks passed" in r.stdout
