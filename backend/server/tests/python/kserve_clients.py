"""The kserve SDK's REST and gRPC clients against a running server (run as a subprocess by
test_kserve_sdk.py: the kserve SDK cannot share a process with tritonclient.grpc).

    python kserve_clients.py HTTP_HOST:PORT GRPC_HOST:PORT
Exits 0 when every check passes; prints the failing check otherwise."""

import asyncio
import sys

import httpx
import numpy as np
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig


async def rest_checks(http):
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=0))
    base = f"http://{http}"
    try:
        assert await client.is_server_live(base) is True, "is_server_live"
        assert await client.is_server_ready(base) is True, "is_server_ready"
        assert await client.is_model_ready(base, "add_sub") is True, "is_model_ready(add_sub)"
        assert await client.is_model_ready(base, "no_such_model") is False, "is_model_ready(unknown) is False"

        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        b = np.ones((1, 16), dtype=np.float32)
        # JSON data from Python lists.
        inputs = [InferInput("INPUT0", [1, 16], "FP32", data=a.reshape(-1).tolist()),
                  InferInput("INPUT1", [1, 16], "FP32", data=b.reshape(-1).tolist())]
        res = await client.infer(base, InferRequest("add_sub", inputs, request_id="k1"), model_name="add_sub")
        assert res.model_name == "add_sub" and res.id == "k1", f"response header {res.model_name} {res.id}"
        out = {o.name: o.as_numpy() for o in res.outputs}
        np.testing.assert_array_equal(out["OUTPUT0"].reshape(1, 16), a + b)
        # Binary tensor data from numpy.
        i0 = InferInput("INPUT0", [1, 16], "FP32")
        i0.set_data_from_numpy(a, binary_data=True)
        i1 = InferInput("INPUT1", [1, 16], "FP32")
        i1.set_data_from_numpy(b, binary_data=True)
        res = await client.infer(base, InferRequest("add_sub", [i0, i1]), model_name="add_sub")
        out = {o.name: o.as_numpy() for o in res.outputs}
        np.testing.assert_array_equal(out["OUTPUT1"].reshape(1, 16), a - b)
        # BYTES as JSON strings.
        s = InferInput("INPUT0", [2, 1], "BYTES", data=["hello", "kserve"])
        res = await client.infer(base, InferRequest("identity_bytes", [s]), model_name="identity_bytes")
        got = [x.decode() if isinstance(x, bytes) else x for x in res.outputs[0].as_numpy().reshape(-1)]
        assert got == ["hello", "kserve"], f"BYTES round trip: {got}"
        # Errors surface with the server's message.
        try:
            await client.infer(base, InferRequest("no_such_model", inputs), model_name="no_such_model")
            raise AssertionError("unknown model did not fail")
        except httpx.HTTPStatusError as e:
            assert "Request for unknown model: 'no_such_model' is not found" in str(e), str(e)
    finally:
        await client.close()


async def grpc_checks(grpc_addr):
    client = InferenceGRPCClient(grpc_addr, timeout=30)
    try:
        assert await client.is_server_live() is True, "grpc is_server_live"
        assert await client.is_server_ready() is True, "grpc is_server_ready"
        assert await client.is_model_ready("add_sub") is True, "grpc is_model_ready"
        a = np.arange(32, dtype=np.float32).reshape(2, 16)
        # Typed contents (Python lists) and raw contents (numpy).
        typed = [InferInput("INPUT0", [2, 16], "FP32", data=a.reshape(-1).tolist()),
                 InferInput("INPUT1", [2, 16], "FP32", data=[1.0] * 32)]
        raw0 = InferInput("INPUT0", [2, 16], "FP32")
        raw0.set_data_from_numpy(a)
        raw1 = InferInput("INPUT1", [2, 16], "FP32")
        raw1.set_data_from_numpy(np.ones((2, 16), np.float32))
        for inputs in (typed, [raw0, raw1]):
            res = await client.infer(InferRequest("add_sub", inputs, request_id="g"))
            out = {o.name: o.as_numpy() for o in res.outputs}
            np.testing.assert_array_equal(out["OUTPUT0"].reshape(2, 16), a + 1)
            assert res.id == "g"
        s = InferInput("INPUT0", [2, 1], "BYTES", data=["a", "bc"])
        res = await client.infer(InferRequest("identity_bytes", [s]))
        got = [x.decode() if isinstance(x, bytes) else x for x in res.outputs[0].as_numpy().reshape(-1)]
        assert got == ["a", "bc"], f"grpc BYTES: {got}"
    finally:
        await client.close()


async def main(http, grpc_addr):
    await rest_checks(http)
    await grpc_checks(grpc_addr)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
    print("kserve checks passed")
