"""A real S3-compatible server on loopback (moto's), for tests, benchmarks and a local cluster.

The server runs in a subprocess of its own session, logging to a file, with one bucket created;
it stops on `stop()`, on leaving a `with` block, or when this interpreter exits.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from cli.net import free_port

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
START_TIMEOUT_S = 30.0


class S3Server:
    """moto's S3 server on 127.0.0.1 in a subprocess, with one bucket created."""

    def __init__(self, bucket: str = "agent-memory", port: int | None = None) -> None:
        self.bucket = bucket
        self.port = port
        self.endpoint = ""
        self.log_path: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> S3Server:
        """Spawn the server, wait until it answers, create the bucket; return self."""
        if self._process is not None:
            return self
        self.port = self.port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        handle, log_name = tempfile.mkstemp(prefix="moto-s3-", suffix=".log")
        self.log_path = Path(log_name)
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
               "AWS_DEFAULT_REGION": REGION}
        with os.fdopen(handle, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,  # its own session: a test's process-group kill leaves it be
            )
        atexit.register(self.stop)
        try:
            self._wait_until_up()
            self._client().create_bucket(Bucket=self.bucket)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"the S3 server exited with {self._process.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # it answered
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the S3 server did not answer within {START_TIMEOUT_S:.0f} s; "
                                       f"see {self.log_path}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Terminate the server (idempotent)."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def storage_options(self) -> dict[str, str]:
        """LanceDB's storage options for this server. Safe concurrent commits need nothing more:
        Lance writes manifests with `If-None-Match: *` on s3://, which moto honours."""
        return {
            "aws_endpoint": self.endpoint,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "aws_region": REGION,
            "allow_http": "true",
        }

    def uri(self, prefix: str = "store") -> str:
        """`s3://bucket/prefix`."""
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def env(self, prefix: str = "store") -> dict[str, str]:
        """The service's storage settings for a store under `prefix`, as environment variables."""
        return {"AGENT_MEMORY_STORAGE_URI": self.uri(prefix),
                "AGENT_MEMORY_STORAGE_OPTIONS": json.dumps(self.storage_options)}

    def objects(self, prefix: str = "") -> list[str]:
        """The keys in the bucket under `prefix`, sorted."""
        keys: list[str] = []
        for page in self._client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(keys)

    def read(self, key: str) -> bytes:
        """The bytes of one object."""
        return bytes(self._client().get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def _client(self) -> Any:
        import boto3  # comes with moto[server]; only the test side needs it

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)
