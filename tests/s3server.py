"""moto's S3 server on loopback, for the tests' ``s3`` fixture and the spill benchmark."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from jsspark.nats_server import free_port

MOTO_SECRET = "moto-s3cr3t-V4lue"  # distinctive, so a test can look for it where it must not be


def start_moto(bucket: str = "lake", timeout: float = 30.0) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """A running moto S3 server with ``bucket``, and delta-rs storage options for it (nothing
    is put in the environment). The caller terminates the process."""
    import boto3

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server did not listen on port {port} within {timeout}s") from None
            time.sleep(0.05)
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key=MOTO_SECRET, region_name="us-east-1"
    ).create_bucket(Bucket=bucket)
    return proc, {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": MOTO_SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "aws_conditional_put": "etag",
    }
