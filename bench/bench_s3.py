"""S3 benchmark against the local moto server (scripts/s3-servers start):

* a cold whole-variable read of a float64 variable (400 MB by default) through `nczarrfs get`
  and through a mount, against zarr-python over obstore on the same bucket, as ratios;
* the number of requests needed to open the dataset with and without `.zmetadata`, counted by
  a forwarding proxy.

Usage: bench/bench_s3.py [--size-mb N] [--endpoint URL]; NCZARRFS_BIN names the binary.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import zarr

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "interop"))
from test_s3_faults import FaultProxy  # noqa: E402

BUCKET = "nczarrfs-test"


def store(endpoint: str, prefix: str, read_only: bool):
    from obstore.store import S3Store

    s3 = S3Store(BUCKET, prefix=prefix, endpoint=endpoint, access_key_id="testing",
                 secret_access_key="testing", region="us-east-1",
                 virtual_hosted_style_request=False, client_options={"allow_http": True})
    return zarr.storage.ObjectStore(s3, read_only=read_only)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=400)
    ap.add_argument("--endpoint", default=os.environ.get("NCZARRFS_S3_ENDPOINT",
                                                         "http://127.0.0.1:5000"))
    args = ap.parse_args()
    binary = os.environ.get("NCZARRFS_BIN", str(REPO / "target" / "release" / "nczarrfs"))
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")

    rows = max(1, args.size_mb * (1 << 20) // (1000 * 8))
    prefix = f"bench-{uuid.uuid4().hex}/big.zarr"
    print(f"writing {rows} x 1000 float64 ({rows * 8000 / 1e6:.0f} MB, 1 MB chunks) to "
          f"{args.endpoint}/{BUCKET}/{prefix}")
    group = zarr.open_group(store(args.endpoint, prefix, False), mode="w", zarr_format=2)
    arr = group.create_array("v", shape=(rows, 1000), chunks=(125, 1000), dtype="<f8",
                             compressors=None, attributes={"_ARRAY_DIMENSIONS": ["y", "x"]})
    step = 125 * 64
    for lo in range(0, rows, step):
        hi = min(rows, lo + step)
        arr[lo:hi] = np.arange(lo * 1000, hi * 1000, dtype="<f8").reshape(hi - lo, 1000)
    location = f"{args.endpoint}/{BUCKET}/{prefix}#mode=zarr,s3"

    def zarr_python():
        zarr.open_group(store(args.endpoint, prefix, True), mode="r", zarr_format=2)["v"][...]

    def get():
        subprocess.run([binary, "get", location, "v", "-o", os.devnull], env=env, check=True)

    def mount():
        with tempfile.TemporaryDirectory() as mnt:
            subprocess.run([binary, "mount", location, mnt], env=env, check=True)
            try:
                with open(Path(mnt) / "v" / "data", "rb") as f:
                    while f.read(8 << 20):
                        pass
            finally:
                subprocess.run(["fusermount3", "-u", mnt], check=False)

    t_zarr = timed(zarr_python)
    t_get = timed(get)
    t_mount = timed(mount)
    mb = rows * 8000 / 1e6
    print(f"cold whole-variable read of {mb:.0f} MB:")
    print(f"  zarr-python+obstore {t_zarr:7.2f} s  {mb / t_zarr:8.1f} MB/s")
    print(f"  nczarrfs get        {t_get:7.2f} s  {mb / t_get:8.1f} MB/s  "
          f"ratio {t_get / t_zarr:.2f} (time vs zarr-python)")
    print(f"  nczarrfs mount      {t_mount:7.2f} s  {mb / t_mount:8.1f} MB/s  "
          f"ratio {t_mount / t_zarr:.2f}")

    proxy = FaultProxy(args.endpoint)
    try:
        for label, consolidate in (("without .zmetadata", False), ("with .zmetadata", True)):
            if consolidate:
                zarr.consolidate_metadata(store(args.endpoint, prefix, False), zarr_format=2)
            proxy.requests.clear()
            subprocess.run([binary, "dump", "-h", f"{proxy.endpoint}/{BUCKET}/{prefix}"
                            "#mode=zarr,s3"], env=env, check=True, capture_output=True)
            print(f"requests to open (dump -h) {label}: {len(proxy.requests)} "
                  f"{[m + ' ' + p.split(prefix, 1)[-1] for m, p in proxy.requests]}")
    finally:
        proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
