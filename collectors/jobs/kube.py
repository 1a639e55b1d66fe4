"""The Kubernetes API as a job source: training pods over plain HTTPS, with a service account or a kubeconfig.

GET `/api/v1/pods?labelSelector=training.kubeflow.org/job-name`, paged, with the stdlib (no client
library to keep in step with the cluster). Credentials: the pod's service account (in-cluster, the
token re-read on every poll), or a kubeconfig context with a token, token file or client certificate.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocescope.collectors.common.json_text import load_json
from rocescope.collectors.jobs.placement import JOB_LABEL, Inventory, Row, parse_pods
from rocescope.config import read_yaml
from rocescope.errors import ConfigError, DecodeError

__all__ = ["KubeApi"]

_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeApi:
    """The Kubernetes API over HTTPS (or HTTP, for a local test server), with a bearer token or client cert."""

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        token_file: Path | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 10.0,
        name: str = "kube-api",
        page: int = 500,
    ):
        self.server = server.rstrip("/")
        self.token = token
        self.token_file = token_file
        self.ssl_context = ssl_context
        self.timeout_s = timeout_s
        self.name = name
        self.page = page

    @classmethod
    def in_cluster(cls, sa_dir: Path = _SA_DIR) -> KubeApi:
        """The pod's service account (token re-read on every poll: bound tokens rotate)."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (sa_dir / "token").exists():
            raise ConfigError("--in-cluster: no KUBERNETES_SERVICE_HOST or service account token (not in a pod?)")
        ctx = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token_file=sa_dir / "token", ssl_context=ctx, name="kube-api")

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None) -> KubeApi:
        """Server, CA and credentials of a kubeconfig context (token, tokenFile or client certificate).

        exec and auth-provider plugins are not run: give the collector a service account token instead.
        """
        import yaml

        try:
            cfg = read_yaml(path.read_text())
            ctx_name = context or cfg["current-context"]
            ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
            cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
            user: dict[str, Any] = (
                next((u["user"] for u in cfg.get("users") or [] if u["name"] == ctx.get("user")), {}) or {}
            )
        except (OSError, yaml.YAMLError, RecursionError, KeyError, StopIteration, TypeError) as exc:
            raise ConfigError(f"kubeconfig {path}: cannot read context {context or '(current)'}: {exc!r}") from None
        if "exec" in user or "auth-provider" in user:
            raise ConfigError(f"kubeconfig {path}: exec/auth-provider credentials are not supported; use a token")
        server = str(cluster.get("server", ""))
        ssl_ctx = None
        if server.startswith("https://"):
            if cluster.get("insecure-skip-tls-verify"):
                ssl_ctx = ssl.create_default_context()
                ssl_ctx.check_hostname = False
                ssl_ctx.verify_mode = ssl.CERT_NONE
            elif cluster.get("certificate-authority-data"):
                pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
                ssl_ctx = ssl.create_default_context(cadata=pem)
            elif cluster.get("certificate-authority"):
                ssl_ctx = ssl.create_default_context(cafile=str(path.parent / cluster["certificate-authority"]))
            else:
                ssl_ctx = ssl.create_default_context()
            _client_cert(ssl_ctx, user, path.parent)
        token_file = Path(path.parent / user["tokenFile"]) if user.get("tokenFile") else None
        return cls(server, token=user.get("token"), token_file=token_file, ssl_context=ssl_ctx, name=f"kube:{ctx_name}")

    def _get(self, url: str) -> dict[str, Any]:
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        token = self.token_file.read_text().strip() if self.token_file is not None else self.token
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self.ssl_context) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            raise DecodeError(f"{self.server}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise DecodeError(f"{self.server}: {exc}") from None
        doc = load_json(body, f"{self.server}: answer")
        if not isinstance(doc, dict):
            raise DecodeError(f"{self.server}: answer is not a pod list")
        return doc

    def pod_list(self) -> dict[str, Any]:
        """Every training pod of the cluster (paged with `limit`/`continue`)."""
        if not self.server.startswith(("https://", "http://")):
            raise ConfigError(f"Kubernetes server {self.server!r} is not an http(s) URL")
        items: list[Any] = []
        token = ""
        while True:
            query = {"labelSelector": JOB_LABEL, "limit": str(self.page)}
            if token:
                query["continue"] = token
            doc = self._get(f"{self.server}/api/v1/pods?{urllib.parse.urlencode(query)}")
            page = doc.get("items")
            if not isinstance(page, list):
                raise DecodeError(f"{self.server}: answer has no `items`")
            items.extend(page)
            token = str((doc.get("metadata") or {}).get("continue") or "")
            if not token:
                return {"kind": "PodList", "items": items}

    def rows(self, inventory: Inventory, now: dt.datetime) -> tuple[list[Row], int]:
        return parse_pods(self.pod_list(), inventory, now)


def _client_cert(ctx: ssl.SSLContext, user: Mapping[str, Any], base: Path) -> None:
    """Load a kubeconfig user's client certificate (files, or inline data written to a private temp dir)."""
    cert, key = user.get("client-certificate"), user.get("client-key")
    if cert and key:
        ctx.load_cert_chain(str(base / cert), str(base / key))
        return
    cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
    if cert_data and key_data:
        with tempfile.TemporaryDirectory() as tmp:
            c, k = Path(tmp) / "c.pem", Path(tmp) / "k.pem"
            c.write_bytes(base64.b64decode(cert_data))
            k.write_bytes(base64.b64decode(key_data))
            ctx.load_cert_chain(str(c), str(k))
