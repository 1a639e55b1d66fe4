"""deploy/k8s: every manifest validates against the Kubernetes OpenAPI-derived JSON schemas (strict: no
unknown fields), shipped by the PyPI package `kubernetes-validate`; plus the things a schema cannot see:
the config parses as rocescope Settings, the targets files as collector targets, the collectors have
the capabilities they need and no more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rocescope.config import Settings
from rocescope.errors import ConfigError

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
VERSION = "1.30.0"

kubernetes_validate = pytest.importorskip("kubernetes_validate")


def _kustomization() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return data


def _docs() -> list[dict[str, Any]]:
    """The manifests kustomize would render (namespace and image applied as it does)."""
    kust = _kustomization()
    image = kust["images"][0]
    out = []
    for name in kust["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            if doc is None:
                continue
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []):
                if c["image"] == image["name"]:
                    c["image"] = f"{image['newName']}:{image['newTag']}"
            out.append(doc)
    return out


DOCS = _docs()


def _by(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name)


def test_every_file_is_listed() -> None:
    assert sorted(_kustomization()["resources"]) == sorted(
        p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"
    )


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_validates_against_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, VERSION, strict=True)


def test_schema_really_rejects() -> None:
    bad = yaml.safe_load(yaml.safe_dump(_by("Deployment", "rocescope-sink")))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSION, strict=True)
    bad = yaml.safe_load(yaml.safe_dump(_by("Deployment", "rocescope-sink")))
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSION, strict=True)


def test_config_and_targets_parse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rocescope.collectors.common.config import load_entries
    from rocescope.collectors.gnmi.targets import load_targets
    from rocescope.collectors.snmp.collector import SnmpDevice

    data = _by("ConfigMap", "rocescope-config")["data"]["rocescope.yaml"]
    settings = Settings(**yaml.safe_load(data))
    assert settings.transport.kind == "kafka" and settings.store.backend == "clickhouse"
    assert settings.kafka.security_protocol == "SASL_SSL" and settings.store.url.startswith("https://")
    targets = _by("ConfigMap", "rocescope-switch-targets")["data"]
    (tmp_path / "gnmi.yaml").write_text(targets["gnmi.yaml"])
    (tmp_path / "snmp.yaml").write_text(targets["snmp.yaml"])
    with pytest.raises(ConfigError, match="unset variable"):
        load_targets(tmp_path / "gnmi.yaml")  # secrets only come from the environment
    for var in ("GNMI_USERNAME", "GNMI_PASSWORD", "SNMP_USER", "SNMP_AUTH_KEY", "SNMP_PRIV_KEY"):
        monkeypatch.setenv(var, "secret-12345678")
    assert [t.name for t in load_targets(tmp_path / "gnmi.yaml")] == ["leaf-r0-01"]
    assert len(load_entries(tmp_path / "snmp.yaml", "SNMP", "devices", SnmpDevice.from_mapping)) == 1


def _containers(kind: str, name: str) -> dict[str, dict[str, Any]]:
    spec = _by(kind, name)["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}


def test_nic_collector_least_privilege() -> None:
    ds = _by("DaemonSet", "rocescope-nic")["spec"]["template"]["spec"]
    assert ds["nodeSelector"] and ds["tolerations"]
    ebpf = _containers("DaemonSet", "rocescope-nic")["ebpf"]["securityContext"]
    assert ebpf["privileged"] is False and ebpf["allowPrivilegeEscalation"] is False
    assert {"BPF", "PERFMON", "NET_ADMIN"} <= set(ebpf["capabilities"]["add"])
    assert "SYS_ADMIN" not in ebpf["capabilities"]["add"] and ebpf["capabilities"]["drop"] == ["ALL"]
    for c in _containers("DaemonSet", "rocescope-nic").values():
        for m in c["volumeMounts"]:
            if m["name"] in ("sys", "modules", "kernel-src", "debugfs"):
                assert m["readOnly"] is True


def test_no_inline_secrets_and_every_pod_reads_the_config() -> None:
    for doc in DOCS:
        assert doc["kind"] != "Secret"  # secrets are created out of band, only referenced
        spec = doc.get("spec", {}).get("template", {}).get("spec")
        if not spec:
            continue
        for c in spec["containers"]:
            env = {e["name"]: e for e in c.get("env", [])}
            assert env["ROCESCOPE_CONFIG"]["value"] == "/etc/rocescope/rocescope.yaml"
            assert "secretKeyRef" in env["ROCESCOPE_STORE__PASSWORD"]["valueFrom"]


def test_switch_shards_match_replicas_and_only_jobs_has_api_access() -> None:
    sts = _by("StatefulSet", "rocescope-switch")
    for c in _containers("StatefulSet", "rocescope-switch").values():
        assert c["args"][-2:] == ["--shard", "auto"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["ROCESCOPE_SHARDS"] == str(sts["spec"]["replicas"])
    binding = _by("ClusterRoleBinding", "rocescope-jobs")
    assert binding["subjects"][0]["name"] == "rocescope-jobs"
    assert _by("Deployment", "rocescope-jobs")["spec"]["template"]["spec"]["serviceAccountName"] == "rocescope-jobs"
    assert _by("ServiceAccount", "rocescope")["automountServiceAccountToken"] is False
    assert _containers("Deployment", "rocescope-analysis")["analyze"]["args"] == ["analyze", "--follow"]
