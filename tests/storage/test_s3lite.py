"""storage/s3lite.py: S3 reads without botocore, signed as botocore signs them and answering as s3fs does."""

import contextlib
import datetime
import http.client
import ipaddress
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from shipyard.errors import StorageError
from shipyard.storage import s3lite, transfer, uri

NOW = datetime.datetime(2026, 11, 29, 5, 6, 7, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize("token", [None, "session-token/with+chars="])
@pytest.mark.parametrize("path, query", [
    ("/bucket", "list-type=2&encoding-type=url&prefix=a%20b%2Bc%2F&max-keys=1000&continuation-token=1%2Fx%3D%3D"),
    ("/bucket/dir/a%20key%2Bplus%25percent%C3%A9~_.-", ""),
])
def test_signature_is_botocores(path, query, token, monkeypatch):
    import botocore.auth
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = urllib.parse.SplitResult("http", "127.0.0.1:9000", path, query, "")
    ours = s3lite.signed_headers("GET", url, "eu-west-3", "AKID", "secret/key", token, NOW)

    request = AWSRequest(method="GET", url=url.geturl(), headers={"x-amz-content-sha256": s3lite.EMPTY_SHA256})
    signer = S3SigV4Auth(Credentials("AKID", "secret/key", token), "s3", "eu-west-3")
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))   # its clock
    signer.add_auth(request)
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"] and ours["host"] == "127.0.0.1:9000"
    assert ours.get("x-amz-security-token") == request.headers.get("X-Amz-Security-Token")


def test_client_only_where_it_serves(monkeypatch):
    for name in ("SHIPYARD_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "HTTPS_PROXY",
                 "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    assert s3lite.client("s3://b/k", uri.s3_endpoint()) is None   # AWS itself: s3fs (bucket regions, redirects)
    monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    assert isinstance(s3lite.client("s3://b/k", uri.s3_endpoint()), s3lite.Client)
    assert s3lite.client("file:///tmp/x", uri.s3_endpoint()) is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert s3lite.client("s3://b/k", uri.s3_endpoint()) is None   # botocore's proxies
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert s3lite.client("s3://b/k", uri.s3_endpoint()) is None   # a profile or a role: botocore's chain
    assert uri.reader("s3://b/k")[0].__class__.__name__ == "S3FileSystem"


KEYS = ["a key with spaces", "plus+sign", "percent%41", "unicodé/ünter", "deep/er/x", "tilde~_.-"]


def test_lists_reads_and_refuses_as_s3fs_does(s3):
    bucket = s3.bucket("lite")
    for i, key in enumerate(KEYS):
        s3.put(f"{bucket}/data/{key}", bytes(range(256)) * (i + 1))
    s3.put(f"{bucket}/datafile", b"not under data/")
    fs, root = uri.reader(f"{bucket}/data")
    assert isinstance(fs, s3lite.Client) and root == "lite/data"
    pages = list(transfer.pages(fs, root, first=2))
    assert [len(page) for page in pages] == [2, 4]            # a first page of 2, then the rest
    ours = {key: value for page in pages for key, value in page.items()}
    theirs = transfer.listing(f"{bucket}/data")[3]            # s3fs's
    assert ours == theirs and sorted(ours) == sorted(KEYS)

    size, etag = ours["unicodé/ünter"]
    read = transfer.read_listed(fs, "lite/data/unicodé/ünter", size, etag, 250, 260)
    assert read == bytes(range(250, 256)) + bytes(range(4))
    assert fs.info("lite/data/plus+sign") == {"name": "lite/data/plus+sign", "type": "file", "size": 512,
                                              "ETag": ours["plus+sign"][1]}
    assert fs.isfile("lite/datafile") and not fs.isfile("lite/data")
    assert fs.exists("lite/data") and not fs.exists("lite/nothing") and not fs.exists("no-such-bucket/x")
    s3.bucket("empty")
    assert fs.exists("empty") and not fs.exists("no-such-bucket")
    assert fs.unstrip_protocol("lite/data/x") == "s3://lite/data/x"
    single = transfer.listing(f"{bucket}/datafile", uri.reader)
    assert single[2] and single[3] == {"datafile": (15, single[3]["datafile"][1])}

    s3.put(f"{bucket}/data/plus+sign", b"x" * 512)            # the same size, other bytes
    with pytest.raises(s3lite.ObjectChanged, match=r"s3://lite/data/plus\+sign changed since it was listed"):
        transfer.read_listed(fs, "lite/data/plus+sign", 512, ours["plus+sign"][1], 0, 10)
    with pytest.raises(FileNotFoundError, match="NoSuchKey: s3://lite/data/gone"):
        transfer.read_listed(fs, "lite/data/gone", 10, "", 0, 10)
    with pytest.raises(StorageError, match="s3://lite/nothing does not exist"):
        transfer.listing(f"{bucket}/nothing", uri.reader)


def test_a_connection_the_endpoint_closed_is_replaced(s3):
    bucket = s3.bucket("alive")
    s3.put(f"{bucket}/k", b"0123456789")
    fs, _ = uri.reader(f"{bucket}/k")
    kept = http.client.HTTPConnection(fs.endpoint.netloc)   # kept alive from an earlier request, then closed
    kept.connect()
    kept.sock.close()
    fs._local.connection = kept   # noqa: SLF001
    assert fs.read_range("alive/k", 4, 10, "") == b"456789"


def test_a_dark_endpoint_is_an_oserror_naming_the_object(s3, monkeypatch):
    monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", "http://127.0.0.1:9")   # nothing listens there
    fs, _ = uri.reader("s3://b/k")
    with pytest.raises(OSError, match="GET s3://b/k: ConnectionRefusedError"):
        fs.read_range("b/k", 0, 1, "")


def test_no_s3_client_is_imported_to_list_and_read(s3):
    bucket = s3.bucket("light")
    s3.put(f"{bucket}/p/x", b"abc")
    code = ("import sys; from shipyard.storage import transfer, uri; l = transfer.listing('s3://light/p', uri.reader);"
            "assert transfer.read_listed(l[0], 'light/p/x', 3, l[3]['x'][1], 0, 3) == b'abc';"
            "print(sorted(m for m in ('botocore', 's3fs', 'aiohttp', 'aiobotocore') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_an_endpoint_answering_503_is_asked_again_and_a_404_is_not(s3_proxy, s3):
    bucket = s3.bucket("again")
    s3.put(f"{bucket}/k", b"0123456789")
    fs, _ = uri.reader(f"{bucket}/k")
    s3_proxy.dark = True   # every request answered 503 until the timer
    threading.Timer(0.3, setattr, (s3_proxy, "dark", False)).start()
    assert fs.read_range("again/k", 2, 6, "") == b"2345"
    gets = [path for method, path in s3_proxy.requests if method == "GET"]
    assert len(gets) > 1 and set(gets) == {"/again/k"}
    s3_proxy.requests.clear()
    with pytest.raises(FileNotFoundError):
        fs.read_range("again/missing", 0, 1, "")
    assert len(s3_proxy.requests) == 1


def _self_signed(directory):
    """A certificate for 127.0.0.1 and its key, as PEM files in `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return directory / "cert.pem", directory / "key.pem"


@pytest.fixture
def tls_endpoint(s3_server, tmp_path):
    """moto behind a TLS front on 127.0.0.1 (a self-signed certificate): its https:// URL and the certificate."""
    cert, key = _self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    upstream = urllib.parse.urlsplit(s3_server)

    def pump(source, sink):
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for end in (source, sink):
            end.close()

    def serve():
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                try:
                    client = context.wrap_socket(client, server_side=True)
                except (OSError, ssl.SSLError):   # a client that refused the certificate
                    client.close()
                    continue
                backend = socket.create_connection((upstream.hostname, upstream.port))
                threading.Thread(target=pump, args=(client, backend), daemon=True).start()
                threading.Thread(target=pump, args=(backend, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"https://127.0.0.1:{listener.getsockname()[1]}", cert
    listener.close()


def test_an_https_endpoint_with_its_ca_bundle_and_without(s3, tls_endpoint, monkeypatch):
    endpoint, cert = tls_endpoint
    bucket = s3.bucket("tls")
    s3.put(f"{bucket}/d/a key", b"over TLS")
    monkeypatch.setenv("SHIPYARD_S3_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(cert))
    fs, root, _, objects = transfer.listing(f"{bucket}/d", uri.reader)
    assert isinstance(fs, s3lite.Client) and list(objects) == ["a key"]
    assert transfer.read_listed(fs, "tls/d/a key", 8, objects["a key"][1], 0, 8) == b"over TLS"
    monkeypatch.delenv("AWS_CA_BUNDLE")   # botocore's default trust: a self-signed certificate is refused
    untrusted, _ = uri.reader(f"{bucket}/d")
    started = time.monotonic()
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED") as refused:
        untrusted.read_range("tls/d/a key", 0, 8, "")
    assert not isinstance(refused.value, s3lite.Unavailable) and time.monotonic() - started < 1   # not asked again


def test_a_listing_without_s3s_namespace_is_read_too(monkeypatch):
    client = s3lite.Client("http://127.0.0.1:9", "us-east-1", "a", "b", None)
    body = (b'<ListBucketResult><Contents><Key>a%2Bb+c</Key><Size>3</Size><ETag>"e"</ETag></Contents>'
            b'<IsTruncated>true</IsTruncated><NextContinuationToken>t</NextContinuationToken></ListBucketResult>')
    monkeypatch.setattr(client, "_request", lambda *args, **kwargs: (200, {}, body))
    assert client.call_s3("list_objects_v2", Bucket="b", Prefix="") == {
        "Contents": [{"Key": "a+b c", "Size": 3, "ETag": '"e"'}], "IsTruncated": True, "NextContinuationToken": "t"}
