"""The one key pair the AWS API accepts: `$SHIPYARD_HOME/aws-credentials.json`, readable by the user only,
made on first use and kept across restarts (a notebook's environment keeps working), replaced only when
asked (`shipyard server --new-aws-keys`: the old pair stops working; `--aws-keys-from-env`: the server's own
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, an S3 store's, become the pair)."""

from __future__ import annotations

import json
import os
import secrets
import string
from dataclasses import dataclass
from pathlib import Path

FILE = "aws-credentials.json"
KEY_ALPHABET = string.ascii_uppercase + string.digits
SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"


@dataclass(frozen=True)
class Keys:
    access_key_id: str        # as AWS's: 20 upper-case letters and digits ("SY" and 18 random)
    secret_access_key: str    # 40 characters


def path(home: Path) -> Path:
    return Path(home) / FILE


def new_keys() -> Keys:
    return Keys("SY" + "".join(secrets.choice(KEY_ALPHABET) for _ in range(18)),
                "".join(secrets.choice(SECRET_ALPHABET) for _ in range(40)))


def read(home: Path) -> Keys | None:
    try:
        found = json.loads(path(home).read_text())
        return Keys(found["aws_access_key_id"], found["aws_secret_access_key"])
    except FileNotFoundError:
        return None


def from_environment() -> Keys:
    """AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY of this process, to be the API's keys (`shipyard server
    --aws-keys-from-env`): for an S3 store with keys of its own, so a notebook signs everything with one pair."""
    from shipyard.errors import ValidationError

    key, secret = os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    if not key or not secret:
        raise ValidationError("--aws-keys-from-env", ..., "needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                                                          "set (the S3 store's keys); leave the flag out to get "
                                                          "keys issued")
    return Keys(key, secret)


def ensure(home: Path, renew: bool = False, given: Keys | None = None) -> Keys:
    """The keys, made now when there are none (or when `renew`); `given` replaces them."""
    if given is None and not renew and (found := read(home)) is not None:
        return found
    keys = given or new_keys()
    renew = renew or given is not None
    target = path(home)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{FILE}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)   # never readable by others, not even briefly
    with os.fdopen(fd, "w") as f:
        json.dump({"aws_access_key_id": keys.access_key_id, "aws_secret_access_key": keys.secret_access_key}, f)
    if renew:
        os.replace(tmp, target)
        return keys
    try:
        os.link(tmp, target)   # only if still absent: a server starting beside us may have made them first
    except FileExistsError:
        keys = read(home)
    finally:
        tmp.unlink()
    return keys


def secret_for(home: Path, access_key: str) -> str | None:
    """The secret of `access_key` when it is the key we issued; None for any other."""
    keys = read(home)
    return keys.secret_access_key if keys is not None and keys.access_key_id == access_key else None
