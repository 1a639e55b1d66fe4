"""An S3 endpoint on loopback over a plain directory: durable storage for the local Tansu broker.

Tansu's object-store engine speaks only `memory://` and `s3://` (no `file://`). `rocescope broker --data
DIR` starts this server over DIR and points Tansu at it, so topics, records and committed offsets outlive
the broker. It serves what Tansu's object store asks for: PUT (with `If-None-Match: *` and `If-Match`
for its optimistic updates), GET (ranges, conditions), HEAD, DELETE and ListObjectsV2. It is a local
convenience, not an S3: no authentication (loopback only), no multipart, no versions; each object is one
file under DIR/<bucket>/, replaced atomically (a crash leaves the old or the new object, never half of one).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from datetime import UTC, datetime
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

log = logging.getLogger(__name__)

XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"


class DirectoryS3:
    """`start()` serves `root` as S3 bucket `bucket` on 127.0.0.1:`port` (0 = any free port)."""

    def __init__(self, root: Path, bucket: str = "tansu", port: int = 0):
        self.root = Path(root)
        self.bucket = bucket
        self._lock = threading.Lock()  # a conditional put checks and writes as one step
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self) -> dict[str, str]:
        """What Tansu's object store reads to find this endpoint (credentials are not checked)."""
        return {
            "AWS_ENDPOINT": self.url,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def start(self) -> DirectoryS3:
        (self.root / self.bucket).mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3dir", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # objects
    def path_of(self, bucket: str, key: str) -> Path | None:
        """The file of `key`, or None for a key that would leave the bucket's directory."""
        parts = key.split("/")
        if bucket != self.bucket or not key or any(p in ("", ".", "..") for p in parts):
            return None
        return self.root / bucket / Path(*parts)

    def keys(self, prefix: str) -> list[str]:
        base = self.root / self.bucket
        found = []
        for dirpath, _, files in os.walk(base):
            rel = Path(dirpath).relative_to(base).as_posix()
            for name in files:
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix) and not name.startswith(".tmp-"):
                    found.append(key)
        return sorted(found)


def etag_of(data: bytes) -> str:
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def _handler(s3: DirectoryS3) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("s3dir: " + format, *args)

        def _target(self) -> tuple[str, str, dict[str, list[str]]]:
            url = urlsplit(self.path)
            bucket, _, key = url.path.lstrip("/").partition("/")
            return unquote(bucket), unquote(key), parse_qs(url.query, keep_blank_values=True)

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body and self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str, message: str) -> None:
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>{escape(message)}</Message></Error>"
            )
            self._send(status, body.encode(), {"Content-Type": "application/xml"})

        def _object(self) -> tuple[Path, str] | None:
            bucket, key, _ = self._target()
            path = s3.path_of(bucket, key)
            if path is None:
                self._error(400, "InvalidArgument", f"bad bucket or key: {bucket}/{key}")
                return None
            return path, key

        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            bucket, key, _ = self._target()
            if not key:  # CreateBucket
                if bucket != s3.bucket:
                    self._error(400, "InvalidBucketName", f"this endpoint serves bucket {s3.bucket} only")
                else:
                    self._send(200)
                return
            target = self._object()
            if target is None:
                return
            path, _ = target
            if_match, if_none_match = self.headers.get("If-Match"), self.headers.get("If-None-Match")
            with s3._lock:
                exists = path.is_file()
                if if_none_match == "*" and exists:
                    self._error(412, "PreconditionFailed", "the object exists")
                    return
                if if_match is not None and (not exists or etag_of(path.read_bytes()) != if_match):
                    self._error(412 if exists else 404, "PreconditionFailed", "the object changed")
                    return
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.parent / f".tmp-{path.name}-{threading.get_ident()}"
                tmp.write_bytes(body)
                os.replace(tmp, path)
            self._send(200, headers={"ETag": etag_of(body)})

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            bucket, key, query = self._target()
            if not key:
                self._list(bucket, query)
                return
            target = self._object()
            if target is None:
                return
            path, _ = target
            try:
                data = path.read_bytes()
                modified = path.stat().st_mtime
            except FileNotFoundError:
                self._error(404, "NoSuchKey", key)
                return
            etag = etag_of(data)
            headers = {
                "ETag": etag,
                "Last-Modified": formatdate(modified, usegmt=True),
                "Content-Type": "application/octet-stream",
                "Accept-Ranges": "bytes",
            }
            if self.headers.get("If-Match") not in (None, etag, "*"):
                self._error(412, "PreconditionFailed", "etag differs")
                return
            if self.headers.get("If-None-Match") in (etag, "*"):
                self._send(304, headers={"ETag": etag})
                return
            wanted = self.headers.get("Range")
            if wanted and wanted.startswith("bytes="):
                first, _, last = wanted[6:].partition("-")
                if first:
                    start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
                else:  # the last N bytes
                    start, end = max(0, len(data) - int(last)), len(data) - 1
                if start >= len(data) or start > end:
                    self._error(416, "InvalidRange", wanted)
                    return
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                self._send(206, data[start : end + 1], headers)
                return
            self._send(200, data, headers)

        def do_DELETE(self) -> None:
            target = self._object()
            if target is None:
                return
            with s3._lock:
                target[0].unlink(missing_ok=True)
            self._send(204)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._error(501, "NotImplemented", "multipart uploads and batch deletes are not served")

        def _list(self, bucket: str, query: dict[str, list[str]]) -> None:
            if bucket != s3.bucket:
                self._error(404, "NoSuchBucket", bucket)
                return

            def arg(name: str) -> str:
                return query.get(name, [""])[0]

            prefix, delimiter = arg("prefix"), arg("delimiter")
            after = arg("continuation-token") or arg("start-after")
            limit = int(arg("max-keys") or 1000)
            contents: list[str] = []
            prefixes: list[str] = []
            truncated, last = False, ""
            for key in s3.keys(prefix):
                if after and key <= after:
                    continue
                cut = key.find(delimiter, len(prefix)) if delimiter else -1
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    if common in prefixes or (after and common <= after):
                        continue
                if len(contents) + len(prefixes) >= limit:
                    truncated = True
                    break
                if cut >= 0:
                    prefixes.append(common)
                    last = key[:cut] + delimiter + "\uffff"  # past every key under this common prefix
                else:
                    contents.append(key)
                    last = key
            entries = []
            for key in contents:
                path = s3.root / bucket / key
                data = path.read_bytes()
                stamp = datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
                entries.append(
                    f"<Contents><Key>{escape(key)}</Key><LastModified>{stamp}</LastModified>"
                    f"<ETag>{escape(etag_of(data))}</ETag><Size>{len(data)}</Size>"
                    "<StorageClass>STANDARD</StorageClass></Contents>"
                )
            entries += [f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes]
            token = f"<NextContinuationToken>{escape(last)}</NextContinuationToken>" if truncated else ""
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{XMLNS}"><Name>{escape(bucket)}</Name>'
                f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(contents) + len(prefixes)}</KeyCount>"
                f"<MaxKeys>{limit}</MaxKeys><IsTruncated>{str(truncated).lower()}</IsTruncated>"
                + "".join(entries)
                + token
                + "</ListBucketResult>"
            )
            self._send(200, body.encode(), {"Content-Type": "application/xml"})

    return Handler
