"""Each host writes a small file to the model and to the output data; algo-1 also writes a large model
(--megabytes of random bytes, which do not compress) and prints its digest."""

import hashlib
import json
import os
import sys

host = os.environ["SM_CURRENT_HOST"]
megabytes = int(sys.argv[sys.argv.index("--megabytes") + 1])
for directory in ("/opt/ml/model", "/opt/ml/output/data"):
    with open(f"{directory}/{host}.json", "w") as f:
        json.dump({"host": host}, f)
if host == json.loads(os.environ["SM_HOSTS"])[0]:
    digest = hashlib.sha256()
    with open("/opt/ml/model/weights.bin", "wb") as f:
        for _ in range(megabytes):
            chunk = os.urandom(1 << 20)
            digest.update(chunk)
            f.write(chunk)
    print(f"weights sha256 {digest.hexdigest()}", flush=True)
