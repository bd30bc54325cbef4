"""Offline checks of the Kubernetes manifests in deploy/k8s (no cluster, no
kubeconform): every manifest parses and names its kind; the DaemonSet's
required fields, host namespaces and volumes; the Job reaches the same
socket; the kustomization lists exactly existing files; every ConfigMap and
Secret a pod refers to exists; the ConfigMap's giftd.yaml is accepted by
giftd itself (when GIFTD names the binary)."""

import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest
import yaml

from deploy_testutil import K8S_DIR, load_yaml_docs

# apiVersion of each kind the manifests may use.
KNOWN_KINDS = {
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Secret": "v1",
    "Service": "v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
}
SOCKET_DIR = "/run/gift"
SOCKET = SOCKET_DIR + "/agent.sock"


def manifests():
    """{file name: [objects]} of every manifest but the kustomization."""
    out = {}
    for path in sorted(K8S_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        out[path.name] = [d for d in load_yaml_docs(path) if d is not None]
    return out


def objects(kind):
    return [o for docs in manifests().values() for o in docs
            if o.get("kind") == kind]


def one(kind):
    found = objects(kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def host_path_volume(spec, path):
    for v in spec.get("volumes", []):
        if v.get("hostPath", {}).get("path") == path:
            return v
    return None


def mount_path(container, volume_name):
    for m in container.get("volumeMounts", []):
        if m["name"] == volume_name:
            return m["mountPath"]
    return None


def test_every_manifest_parses_with_kind_and_name():
    found = manifests()
    assert set(found) >= {"namespace.yaml", "giftd-configmap.yaml",
                          "job-token-secret.yaml", "giftd-daemonset.yaml",
                          "giftd-metrics-service.yaml", "servicemonitor.yaml",
                          "example-job.yaml"}
    for name, docs in found.items():
        assert docs, f"{name}: no object"
        for o in docs:
            kind = o.get("kind")
            assert kind in KNOWN_KINDS, f"{name}: unknown kind {kind!r}"
            assert o.get("apiVersion") == KNOWN_KINDS[kind], (
                f"{name}: {kind} with apiVersion {o.get('apiVersion')!r}")
            meta = o.get("metadata") or {}
            assert meta.get("name"), f"{name}: {kind} without metadata.name"
            if kind != "Namespace":
                assert meta.get("namespace") == "gift", (
                    f"{name}: {kind} {meta['name']} outside namespace gift")


def test_daemonset_required_fields():
    ds = one("DaemonSet")
    spec = ds["spec"]
    labels = spec["template"]["metadata"]["labels"]
    selector = spec["selector"]["matchLabels"]
    assert selector, "empty selector"
    for k, v in selector.items():
        assert labels.get(k) == v, f"selector {k}={v} not in template labels"
    pod = pod_spec(ds)
    assert pod["hostIPC"] is True, "hostIPC: CUDA IPC and /dev/shm"
    assert pod["hostPID"] is True, "hostPID: giftd checks rank pids"
    assert pod["nodeSelector"], "giftd belongs on GPU nodes"
    assert any(t.get("key") == "nvidia.com/gpu" for t in pod["tolerations"])
    assert pod["containers"], "no container"
    for c in pod["containers"] + pod.get("initContainers", []):
        assert c.get("name") and c.get("image"), f"container {c}: no image"
    giftd = next(c for c in pod["containers"] if c["name"] == "giftd")
    ports = {p["name"]: p["containerPort"] for p in giftd["ports"]}
    assert ports.get("metrics") == 9464
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        cmd = giftd[probe]["exec"]["command"]
        assert cmd[0].endswith("/giftctl") and cmd[-1] == "health", probe
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(ports["metrics"])
    socket = host_path_volume(pod, SOCKET_DIR)
    assert socket, "no hostPath volume for the socket directory"
    assert mount_path(giftd, socket["name"]) == SOCKET_DIR
    shm = host_path_volume(pod, "/dev/shm")
    assert shm and mount_path(giftd, shm["name"]) == "/dev/shm"
    # Every mount names a volume of the pod.
    names = {v["name"] for v in pod["volumes"]}
    for c in pod["containers"] + pod.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            assert m["name"] in names, f"{c['name']}: mount of {m['name']}"


def test_configmap_points_giftd_at_the_shared_socket():
    cm = one("ConfigMap")
    config = yaml.safe_load(cm["data"]["giftd.yaml"])
    assert config["agent_socket"] == SOCKET
    # The probes run giftctl inside the pod against the default address.
    assert config["control_address"] == "127.0.0.1:50151"
    ds = one("DaemonSet")
    giftd = pod_spec(ds)["containers"][0]
    args = giftd["args"]
    assert args[args.index("--config") + 1] == "/etc/gift/giftd.yaml"
    host, port = config["metrics_address"].rsplit(":", 1)
    assert host == "0.0.0.0" and int(port) == 9464


def test_job_mounts_the_same_socket_as_the_daemonset():
    job = one("Job")
    pod = pod_spec(job)
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    assert pod["hostIPC"] is True and pod["hostPID"] is True
    ds_pod = pod_spec(one("DaemonSet"))
    assert (pod["securityContext"]["runAsUser"] ==
            ds_pod["securityContext"]["runAsUser"]), (
        "the socket and shm are 0600: same user as giftd")
    volume = host_path_volume(pod, SOCKET_DIR)
    assert volume, "the Job does not mount the socket directory"
    for c in pod["containers"]:
        assert c.get("image")
        assert mount_path(c, volume["name"]) == SOCKET_DIR
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        assert env.get("GIFT_AGENT_SOCKET") == SOCKET
        shm = host_path_volume(pod, "/dev/shm")
        assert shm and mount_path(c, shm["name"]) == "/dev/shm"


def test_service_and_servicemonitor_select_the_daemonset():
    ds_labels = one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    svc = one("Service")
    for k, v in svc["spec"]["selector"].items():
        assert ds_labels.get(k) == v
    svc_port = svc["spec"]["ports"][0]
    assert svc_port["name"] == "metrics" and svc_port["targetPort"] == "metrics"
    sm = one("ServiceMonitor")
    for k, v in sm["spec"]["selector"]["matchLabels"].items():
        assert svc["metadata"]["labels"].get(k) == v
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"


def test_kustomization_lists_existing_files_only():
    kust = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kust["kind"] == "Kustomization"
    resources = kust["resources"]
    assert len(resources) == len(set(resources)), "a resource listed twice"
    for r in resources:
        assert (K8S_DIR / r).is_file(), f"kustomization lists missing {r}"
    # Everything but the optional ServiceMonitor is deployed.
    expected = set(manifests()) - {"servicemonitor.yaml"}
    assert set(resources) == expected
    image_names = {i["name"] for i in kust.get("images", [])}
    for kind in ("DaemonSet", "Job"):
        for c in pod_spec(one(kind))["containers"]:
            assert c["image"] in image_names, f"{kind}: image not pinned"


def test_every_configmap_and_secret_reference_exists():
    defined = {(o["kind"], o["metadata"]["name"])
               for docs in manifests().values() for o in docs}
    refs = []
    for kind in ("DaemonSet", "Job"):
        pod = pod_spec(one(kind))
        for v in pod.get("volumes", []):
            if "configMap" in v:
                refs.append(("ConfigMap", v["configMap"]["name"]))
            if "secret" in v:
                refs.append(("Secret", v["secret"]["secretName"]))
        for c in pod["containers"] + pod.get("initContainers", []):
            for e in c.get("env", []):
                src = e.get("valueFrom", {})
                if "configMapKeyRef" in src:
                    refs.append(("ConfigMap", src["configMapKeyRef"]["name"]))
                if "secretKeyRef" in src:
                    refs.append(("Secret", src["secretKeyRef"]["name"]))
            for e in c.get("envFrom", []):
                if "configMapRef" in e:
                    refs.append(("ConfigMap", e["configMapRef"]["name"]))
                if "secretRef" in e:
                    refs.append(("Secret", e["secretRef"]["name"]))
    assert ("ConfigMap", "giftd-config") in refs
    assert ("Secret", "giftd-job-token") in refs
    for ref in refs:
        assert ref in defined, f"{ref[0]} {ref[1]} is referenced, not defined"


def test_kubectl_kustomize_builds_when_available():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: kustomize build not checked")
    out = subprocess.run([kubectl, "kustomize", str(K8S_DIR)], check=True,
                         capture_output=True, text=True).stdout
    kinds = [d["kind"] for d in yaml.safe_load_all(out) if d]
    assert sorted(kinds) == sorted(
        ["Namespace", "ConfigMap", "Secret", "DaemonSet", "Service", "Job"])
    assert "registry.example.com/gift:0.1.0" in out


def test_configmap_config_is_accepted_by_giftd():
    giftd = os.environ.get("GIFTD")
    if not giftd:
        pytest.skip("GIFTD not set: giftd not run on the ConfigMap's config")
    config = one("ConfigMap")["data"]["giftd.yaml"]
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "giftd.yaml"
        path.write_text(config)
        r = subprocess.run([giftd, "--config", str(path), "--print-config"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        printed = yaml.safe_load(r.stdout)
        for key, value in yaml.safe_load(config).items():
            assert printed[key] == value, key
